"""env=mix: members with their own options and sampling weights; groups never mix envs; metrics
and held-out figures per member and overall."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from envs.gym_adapter import GymAdapter
from envs.mix import MixEnv, member_of
from experiments.factories import EnvMaker
from learner.loop import LoopConfig, make_jobs
from tests.cli import eval_cli, run_cli
from docs.examples.repeat_word import RepeatWordEnv
from tests.toy_envs import CountdownEnv

MEMBERS = ["env=mix", "env.members.count.entry_point=tests.toy_envs:CountdownEnv", "env.members.count.weight=3",
           "env.members.say.entry_point=docs.examples.repeat_word:RepeatWordEnv",
           "env.members.say.turns=1"]


def test_two_member_mixture_through_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    p = run_cli(*MEMBERS, "model=tiny", "mode=eval", "steps=2", "tasks_per_step=6", "group_size=2", "n_envs=2",
                "sampling.max_new_tokens=4", "eval.n_tasks=2", "wandb.mode=disabled", f"run_dir={run_dir}")
    assert p.returncode == 0, p.stderr[-3000:]
    split = json.loads((run_dir / "tasks.json").read_text())
    assert Counter(map(member_of, split["held_out"])) == {"count": 2, "say": 2}  # each member's own split
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    turns = [json.loads(line) for line in (run_dir / "turns.jsonl").read_text().splitlines()]
    for r in rows:  # per-member figures are those of the member's episodes in that step
        assert r["env/count/episodes"] + r["env/say/episodes"] == r["episodes"] == 12
        for m in ("count", "say"):
            ends = [t["outcome"] for t in turns if t["episode_done"] and t["episode_id"].startswith(f"s{r['step']}-")
                    and member_of(t["task_id"]) == m]
            assert r[f"env/{m}/episodes"] == len(ends) and None not in ends
            assert r[f"env/{m}/outcome_mean"] == (pytest.approx(sum(ends) / len(ends)) if ends else None)
    first = rows[0]
    for m in ("count", "say"):  # held-out figures per member, over its own held-out tasks
        assert first[f"heldout/{m}/pass@1_n"] == 2 and f"heldout/{m}/outcome_mean" in first
    assert first["heldout/pass@1_n"] == 4
    groups: dict[str, set] = {}
    for t in turns:
        groups.setdefault(t["group_id"], set()).add(t["task_id"])
    assert all(len(g) == 1 for g in groups.values())  # a group is one task, so one member
    by_member = {m: [t for t in turns if member_of(t["task_id"]) == m] for m in ("count", "say")}
    assert all(t["next_state"]["kind"] == "user_reply" for t in by_member["count"])
    assert all(t["next_state"]["kind"] == "observation" and t["outcome"] in (0.0, 1.0) for t in by_member["say"])
    assert by_member["say"] and all(t["step_index"] == 0 for t in by_member["say"])  # its own option turns=1

def test_weights_hold_over_many_draws_and_groups_stay_in_one_member():
    ids = [f"count/n{k}" for k in range(2, 6)] + [f"say/seed-{k}" for k in range(40)]  # 4 vs 40 tasks
    cfg = LoopConfig(steps=1, tasks_per_step=8, group_size=3, seed=0, mix={"count": 3.0, "say": 1.0})
    jobs = [j for step in range(500) for j in make_jobs(ids, step, cfg)]
    picked = Counter(member_of(j.task_id) for j in jobs if j.episode_id.endswith("-g0"))
    assert abs(picked["count"] / sum(picked.values()) - 0.75) < 0.02  # 4000 draws: 3:1 despite 4 vs 40 tasks
    groups: dict[str, set] = {}
    for j in jobs:
        groups.setdefault(j.group_id, set()).add(j.task_id)
    assert all(len(g) == 1 for g in groups.values())


def test_mix_env_routes_by_prefix_and_splits_each_member():
    env = MixEnv({"count": EnvMaker(CountdownEnv, {}), "say": EnvMaker(GymAdapter, {"env_class": RepeatWordEnv, "n_seeds": 10})})
    assert "count/n3" in env.task_ids()
    obs, info = env.reset(options={"task_id": "count/n3"})
    assert info["task_id"] == "count/n3" and "from 3" in obs and env.oracle_action() == "3"
    split = env.task_split(2, 1234)
    assert Counter(map(member_of, split.held_out)) == {"count": 2, "say": 2}
    assert not set(split.train) & set(split.held_out) and len(split.train) == 2 + 8
    with pytest.raises(KeyError, match="no member 'other'"):
        env.reset(options={"task_id": "other/x"})
    env.close()


class CountdownButThree(CountdownEnv):
    def demonstrable(self, task_id: str) -> bool:
        return task_id != "n3"


def test_mix_env_asks_the_member_which_tasks_its_oracle_can_act_out():
    env = MixEnv({"count": EnvMaker(CountdownButThree, {}), "say": EnvMaker(CountdownEnv, {})})
    assert [t for t in env.task_ids() if not env.demonstrable(t)] == ["count/n3"]
    env.close()


def test_mixture_misconfiguration_gives_one_line(tmp_path):
    for args, says in [(["env=mix"], "env=mix needs members"),
                       (["env=mix", "env.members.a.env=nope"], "env.members.a.env='nope': choose one of"),
                       (["env=mix", "env.members.a.entry_point=tests.toy_envs:CountdownEnv", "env.members.a.bogus=1"],
                        "env.members.a: CountdownEnv has no option bogus"),
                       (["env=mix", "env.members.a.entry_point=tests.toy_envs:CountdownEnv", "env.members.a.weight=0"],
                        "weight=0.0: must be above 0")]:
        p = run_cli(*args, "policy=random", "mode=eval", "steps=1", f"run_dir={tmp_path}/r")
        assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
        assert says in p.stderr, p.stderr[-1000:]


def test_standalone_evaluation_reports_each_member(tmp_path):
    p = eval_cli("env=mix", "env.members.count.entry_point=tests.toy_envs:CountdownEnv",
                 "env.members.guess.entry_point=docs.examples.guess_number:GuessNumberEnv", "env.members.guess.high=8",
                 "policy=oracle", "n_tasks=2", "wandb.mode=disabled", f"out={tmp_path}/e")
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads((tmp_path / "e" / "eval.json").read_text())
    assert set(report["members"]) == {"count", "guess"}
    for m in ("count", "guess"):
        assert report["members"][m]["pass@1"]["value"] == 1.0 and report["members"][m]["pass@1"]["n"] == 2
    assert report["estimates"]["pass@1"]["n"] == 4
    assert "member guess:" in (tmp_path / "e" / "eval.md").read_text()
