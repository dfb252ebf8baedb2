"""`python -m experiments.run` end to end without a model (oracle / random policies, env=custom)."""
from __future__ import annotations

import json

import yaml

from tests.cli import run_cli


def test_custom_env_runs_through_the_cli_and_writes_the_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:CountdownEnv", "policy=oracle", "mode=eval", "n_envs=2",
                "steps=2", "tasks_per_step=3", "group_size=2", f"run_dir={run_dir}")
    assert p.returncode == 0, p.stderr
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["env"]["entry_point"] == "tests.toy_envs:CountdownEnv" and cfg["steps"] == 2
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert r["episodes"] == 6 and r["outcome_mean"] == 1.0 and r["status_counts"] == {"ok": r["turns"]}
        for key in ("reward_mean", "prm_score_mean", "opd_accept_rate", "policy_version", "timings"):
            assert key in r
    turns = [json.loads(line) for line in (run_dir / "turns.jsonl").read_text().splitlines()]
    assert len(turns) == sum(r["turns"] for r in rows)
    for key in ("episode_id", "task_id", "group_id", "step_index", "policy_version", "prompt_ids", "response_ids",
                "rollout_logprobs", "action", "next_state", "status", "outcome", "prm", "opd"):
        assert key in turns[0]
    assert set(turns[0]["next_state"]) == {"role", "content", "kind", "data"}
    # groups hold group_size episodes of one task
    groups: dict[str, set] = {}
    for t in turns:
        groups.setdefault(t["group_id"], set()).add((t["task_id"], t["episode_id"]))
    assert all(len({tid for tid, _ in g}) == 1 and len({eid for _, eid in g}) == 2 for g in groups.values())


def test_misconfiguration_gives_one_clear_line(tmp_path):
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:CountdownEnv", "+env.bogus=1", "policy=oracle", "mode=eval", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "has no option bogus" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:Nope", "policy=oracle", "mode=eval", f"run_dir={tmp_path}/r2")
    assert p.returncode != 0 and "cannot load" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("env=custom", "env.entry_point=json:dumps", "policy=oracle", "mode=eval", f"run_dir={tmp_path}/r3")
    assert p.returncode != 0 and "not a subclass" in p.stderr
    p = run_cli("policy=oracle", "mode=eval", "no_such_key=1", f"run_dir={tmp_path}/r4")
    assert p.returncode != 0 and "no_such_key" in p.stderr
