"""resume=true continues a training run where it stopped: same step, policy version, optimizer."""
from __future__ import annotations

import json

from tests.test_run_cli import run_cli

COMMON = ["env=custom", "env.entry_point=tests.toy_envs:FirstCharEnv", "model=tiny", "mode=outcome", "n_envs=4",
          "tasks_per_step=2", "group_size=4", "sampling.max_new_tokens=2", "learner.lr=0.01", "learner.max_staleness=0",
          "wandb.mode=disabled"]


def test_resume_continues_steps_and_versions(tmp_path):
    p = run_cli(*COMMON, "steps=2", f"run_dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-2000:]
    info = json.loads((tmp_path / "checkpoints" / "latest" / "learner.json").read_text())
    assert info["step"] == 2
    p = run_cli(*COMMON, "steps=4", "resume=true", f"run_dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # nothing repeated, nothing lost
    versions = [r["policy_version"] for r in rows]
    assert versions == sorted(versions) and versions[2] >= info["policy_version"]
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    # the resumed run's rollouts were sampled by the checkpoint's weights, not fresh ones
    assert min(t["policy_version"] for t in turns if t["episode_id"].startswith("s2-")) == info["policy_version"]
    assert json.loads((tmp_path / "checkpoints" / "latest" / "learner.json").read_text())["step"] == 4
