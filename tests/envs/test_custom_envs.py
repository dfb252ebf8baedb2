"""`env=custom env.entry_point=module:Class` takes the three shapes of env a user may have: an
AgentEnv with hooks, an AgentEnv that overrides reset/step itself, and a plain gymnasium.Env
with text actions (through envs.gym_adapter); what cannot run fails with one line."""
from __future__ import annotations

import json

import pytest

from docs.examples.repeat_word import RepeatWordEnv
from envs.gym_adapter import GymAdapter
from tests.cli import run_cli
from tests.toy_envs import PlainStepAgentEnv

TINY = ["model=tiny", "mode=eval", "steps=1", "tasks_per_step=2", "group_size=2", "n_envs=2", "sampling.max_new_tokens=4",
        "eval.n_tasks=2", "wandb.mode=disabled"]


def _run(tmp_path, entry_point: str, *extra: str) -> tuple[list[dict], list[dict]]:
    run_dir = tmp_path / "run"
    p = run_cli("env=custom", f"env.entry_point={entry_point}", *TINY, *extra, f"run_dir={run_dir}")
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    turns = [json.loads(line) for line in (run_dir / "turns.jsonl").read_text().splitlines()]
    assert rows[0]["episodes"] == 4 and rows[0]["outcome_mean"] is not None and "heldout/pass@1" in rows[0]
    return rows, turns


def test_agent_env_with_hooks(tmp_path):
    _, turns = _run(tmp_path, "tests.toy_envs:CountdownEnv")
    assert {t["next_state"]["kind"] for t in turns} == {"user_reply"} and all(t["outcome"] in (-1, 1) for t in turns)
    assert {t["task_id"] for t in turns} <= {"n2", "n3", "n4", "n5"}


def test_agent_env_with_its_own_reset_and_step(tmp_path):
    _, turns = _run(tmp_path, "tests.toy_envs:PlainStepAgentEnv", "env.n_seeds=50")
    assert all(t["task_id"].startswith("seed-") and int(t["task_id"][5:]) < 50 for t in turns)
    # its info["next_state"] won over the observation; its reward is the outcome
    assert {t["next_state"]["kind"] for t in turns} == {"check"}
    assert all(t["outcome"] == (1.0 if t["next_state"]["data"]["verdict"] == 1 else 0.0) for t in turns)


def test_plain_gymnasium_env_tasks_by_seed(tmp_path):
    _, turns = _run(tmp_path, "docs.examples.repeat_word:RepeatWordEnv", "env.turns=2", "env.role=tool", "env.kind=prompt",
                    "env.max_turns=5")
    assert len(turns) == 8 and all(t["outcome"] in (0.0, 1.0, 2.0) for t in turns)  # summed rewards of 2 turns
    for t in turns:
        prompt, _ = RepeatWordEnv().reset(seed=int(t["task_id"].removeprefix("seed-")))
        ns = t["next_state"]
        assert (ns["role"], ns["kind"], ns["content"]) == ("tool", "prompt", prompt)
        assert ns["data"]["verdict"] == -1 and ns["data"]["hint"].startswith("Reply with exactly")  # what judge=rules reads


@pytest.mark.parametrize("entry_point, says", [
    ("tests.toy_envs:DiscreteGymEnv", "DiscreteGymEnv's action space is Discrete(4), not text"),
    ("tests.toy_envs:HooklessEnv", "HooklessEnv lacks the AgentEnv hooks task_ids, load_task, _act"),
    ("docs.examples.repeat_word:WORDS", "is not a subclass of gymnasium.Env"),
])
def test_what_cannot_run_fails_with_one_line(tmp_path, entry_point, says):
    p = run_cli("env=custom", f"env.entry_point={entry_point}", "policy=random", "mode=eval", "steps=1",
                f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    (line,) = [x for x in p.stderr.splitlines() if x.startswith("error:")]
    assert says in line


def test_adapter_outcome_last_and_turn_limit():
    env = GymAdapter(RepeatWordEnv, {"turns": 3}, outcome="last", max_turns=2)
    obs, info = env.reset(options={"task_id": "seed-5"})
    word = obs.removeprefix("Repeat: ")
    _, r, term, _, _ = env.step(word)
    assert not term and r == 0.0
    _, r, term, _, info = env.step("wrong")  # the turn limit ends it with the rewards so far: the last one, 0
    assert term and info["outcome"] == 0.0
    env = GymAdapter(RepeatWordEnv, {"turns": 2})
    env.reset(options={"task_id": "seed-5"})
    env.step(word)
    _, _, term, trunc, info = env.step(word)
    assert (term, trunc, info["outcome"]) == (True, False, 2.0)  # the inner env's own truncation ends it; summed
    with pytest.raises(KeyError, match="poses tasks by seed"):
        env.reset(options={"task_id": "n3"})


def test_adapter_random_actions_follow_the_job_seed():
    import numpy as np

    env = GymAdapter(RepeatWordEnv)
    a, b = (env.random_action(np.random.default_rng(3)) for _ in range(2))
    assert a == b and len(a) <= 16
    assert 0 <= len(GymAdapter(PlainStepAgentEnv).random_action(np.random.default_rng(0))) <= 64


def test_gymnasium_style_subclass_calls_super_reset_and_trains_on_its_verdicts(tmp_path):
    """The subclass's reset calls super().reset(seed=seed) as Gymnasium asks: the base only seeds
    it, and a binary run with judge=rules trains on the verdicts its own info gives."""
    env = PlainStepAgentEnv()
    assert env.reset(seed=3) == ("Say a word.", {}) and env.np_random_seed == 3
    rows, turns = _run(tmp_path, "tests.toy_envs:PlainStepAgentEnv", "mode=binary", "judge=rules", "env.n_seeds=50")
    votes = {t["next_state"]["data"]["verdict"]: t["prm"]["score"] for t in turns}
    assert votes and all(score == verdict for verdict, score in votes.items())  # the rules judge read the env's verdict
    assert rows[0]["policy_version"] == 1  # it trained


@pytest.mark.parametrize("mode", ["outcome", "combine"])
def test_gymnasium_style_subclass_trains_in_the_other_modes(tmp_path, mode):
    """The docs' Gymnasium-style env (own reset/step, hints in its info) under outcome (its summed
    rewards) and combine (PRM votes from its verdicts, OPD from its hints)."""
    rows, turns = _run(tmp_path, "docs.examples.guess_number_gym:GuessNumberGymEnv", f"mode={mode}", "judge=rules",
                       "env.n_seeds=50", "env.high=4", "env.max_turns=2")
    assert all(t["task_id"].startswith("seed-") for t in turns)
    assert rows[0]["policy_version"] == 1 or rows[0]["train"].get("skipped"), rows[0]
    if mode == "combine":
        assert rows[0]["prm_score_mean"] is not None and "opd_accept_rate" in rows[0]
    else:
        assert {t["outcome"] for t in turns} <= {-1.0, 0.0, 1.0}
