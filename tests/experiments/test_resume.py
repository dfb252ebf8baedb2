"""resume=true continues a training run where it stopped: same step, policy version, optimizer."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

from tests.cli import REPO, run_cli

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


# experiments.run with the learner's checkpoint replaced by SIGKILL: the process dies after a
# step's metrics and turns are written and before that step's checkpoint is committed.
KILLED_AT_CHECKPOINT = (
    "import os, runpy, signal, sys\n"
    "from learner.torch_learner import TorchLearner\n"
    "TorchLearner.save_checkpoint = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
    "sys.argv[0] = 'experiments.run'\n"
    "runpy.run_module('experiments.run', run_name='__main__', alter_sys=True)\n"
)


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_kill_between_records_and_checkpoint_never_repeats_a_step(tmp_path):
    p = run_cli(*COMMON, "steps=2", f"run_dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run([sys.executable, "-c", KILLED_AT_CHECKPOINT, *COMMON, "steps=4", "resume=true",
                        f"run_dir={tmp_path}", "progress=false"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    # the window: step 2 is logged, the checkpoint still says 2 steps
    assert [r["step"] for r in _lines(tmp_path / "metrics.jsonl")] == [0, 1, 2]
    assert json.loads((tmp_path / "checkpoints" / "latest" / "learner.json").read_text())["step"] == 2
    p = run_cli(*COMMON, "steps=4", "resume=true", f"run_dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-2000:]
    rows = _lines(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    turns = _lines(tmp_path / "turns.jsonl")
    assert len(turns) == sum(r["turns"] for r in rows) == 4 * 2 * 4  # steps x tasks x group, one turn each
    assert sorted({t["episode_id"].split("-")[0] for t in turns}) == ["s0", "s1", "s2", "s3"]
    assert len({t["episode_id"] for t in turns}) == len(turns)  # no episode logged twice
