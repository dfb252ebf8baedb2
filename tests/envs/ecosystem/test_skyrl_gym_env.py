"""env=skyrl_gym on skyrl-gym's own gsm8k envs: the oracle and wrong answers through the Runner,
SkyRL's multi-turn chat messages as next states, a SkyRL dataset file, and the CLI."""
from __future__ import annotations

import asyncio
import json

import pytest

from agent.actors import OracleActor, RandomActor
from agent.rollout import EpisodeJob, Runner
from tests.cli import run_cli

pytest.importorskip("skyrl_gym", reason="optional extra skyrl-gym not installed: .venv/bin/pip install -r requirements-extras.txt")
from envs.ecosystem.skyrl_gym import INSTRUCTION, SkyRLGymEnv  # noqa: E402


def run(make_env, make_actor, n: int):
    runner = Runner(make_env, make_actor, n_envs=2, progress=False)
    jobs = [EpisodeJob(episode_id=f"e{i}", task_id=f"skyrl-{i:05d}", group_id=f"g{i}", seed=i) for i in range(n)]
    try:
        return asyncio.run(runner.run(jobs))
    finally:
        runner.close()


def test_the_oracle_is_graded_correct_by_skyrls_gsm8k_and_wrong_answers_are_not():
    episodes = run(lambda: SkyRLGymEnv(env_class="gsm8k", n_problems=20), lambda job: OracleActor(), 6)
    for ep in episodes:
        assert ep.outcome == 1.0 and len(ep.turns) == 1
        assert ep.turns[0].next_state.data == {"reward": 1.0, "metadata": {}, "verdict": 1}
        assert ep.turns[0].messages[-1]["content"].endswith(INSTRUCTION)  # SkyRL's GSM8K prompt
    env = SkyRLGymEnv(env_class="gsm8k", n_problems=20)
    env.reset(options={"task_id": "skyrl-00000"})
    _, reward, done, _, info = env.step(f"#### {env.task.answer}1")
    assert done and reward == -1.0 and info["next_state"].data["reward"] == 0.0 and info["next_state"].data["verdict"] == -1


def test_multi_turn_gsm8k_returns_skyrls_chat_messages_until_the_answer_is_right():
    env = SkyRLGymEnv(env_class="gsm8k_multi_turn", n_problems=20)
    env.reset(options={"task_id": "skyrl-00002"})
    obs, reward, done, _, info = env.step("#### 123456789")
    ns = info["next_state"]
    assert not done and reward == 0.0 and ns.role == "user" and "'#### ANSWER'" in obs  # SkyRL's own follow-up message
    assert 0 < ns.data["reward"] < 1 and "verdict" not in ns.data  # a format score: no verdict either way
    _, reward, done, _, info = env.step(env.task.oracle[0])  # the right answer, on a later turn
    assert done and reward == 1.0 and info["turn"] == 2
    # random answers: every episode ends by SkyRL's own turn limit (5) or a right answer
    for ep in run(lambda: SkyRLGymEnv(env_class="gsm8k_multi_turn", n_problems=20), lambda job: RandomActor(job.seed), 6):
        assert ep.outcome in (1.0, -1.0) and 1 <= len(ep.turns) <= 5 and ep.turns[-1].episode_done


def test_a_skyrl_dataset_file_and_bad_options(tmp_path):
    rows = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2? End with #### N."}],
             "env_class": "gsm8k", "reward_spec": {"method": "rule", "ground_truth": "4"}, "extra_info": {"index": 0}}]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = SkyRLGymEnv(env_class="aime", data=str(data))  # the row's own env_class wins
    obs, info = env.reset()
    assert obs == "2+2? End with #### N." and info["messages"][0] == {"role": "system", "content": "Be brief."}
    assert env.step("#### 4")[1] == 1.0
    with pytest.raises(ValueError, match="unknown skyrl-gym env_class 'nope'"):
        SkyRLGymEnv(env_class="nope")
    with pytest.raises(ValueError, match="needs env.data=FILE"):
        SkyRLGymEnv(env_class="text2sql")
    (tmp_path / "bad.jsonl").write_text('{"question": "no prompt list"}\n')
    with pytest.raises(ValueError, match="row 1 is not a SkyRL row"):
        SkyRLGymEnv(data=str(tmp_path / "bad.jsonl"))


@pytest.mark.slow  # a CLI process: ~45-80 s on a loaded 2-core machine
def test_skyrl_gym_runs_through_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    p = run_cli("env=skyrl_gym", "policy=oracle", "mode=eval", "n_envs=2", "steps=1", "tasks_per_step=2",
                "group_size=2", "eval.every=0", f"run_dir={run_dir}")
    assert p.returncode == 0, p.stderr[-2000:]
    row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert row["episodes"] == 4 and row["outcome_mean"] == 1.0 and row["status_counts"] == {"ok": 4}
    p = run_cli("env=skyrl_gym", "env.env_class=text2sql", "policy=oracle", "mode=eval", f"run_dir={tmp_path}/r2")
    assert p.returncode != 0 and "needs env.data=FILE" in p.stderr and "Traceback" not in p.stderr
