"""`python -m experiments.bench step`: one step under the old settings against the defaults, the
old job optionally on another revision's code (a temporary git worktree)."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from experiments.bench import step
from tests.cli import REPO

SMALL = ["model=tiny", "n_envs=2", "tasks_per_step=1", "group_size=2", "sampling.max_new_tokens=8",
         "env.max_turns=2"]


def _worktrees_under(root: Path) -> list[str]:
    """This checkout's worktrees inside `root`: each test puts its temp dirs in its own root, so a
    worktree another test (another xdist worker) holds at the same moment is not counted."""
    out = subprocess.run(["git", "-C", str(REPO), "worktree", "list", "--porcelain"], capture_output=True,
                         text=True, timeout=30).stdout
    paths = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]
    return [p for p in paths if Path(p).resolve().is_relative_to(root.resolve())]


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.mark.slow
def test_the_old_job_runs_on_the_old_revision_and_its_worktree_goes(own_tmp):
    out = step.main(["--old-rev", "HEAD", *SMALL])
    assert out["old_rev"] == "HEAD" and out["overrides"] == SMALL
    assert out["old_step_s"] > 0 and out["new_step_s"] > 0 and out["step_speedup"] > 0
    assert _worktrees_under(own_tmp) == []


def test_a_revision_git_does_not_know_is_one_line(own_tmp):
    with pytest.raises(SystemExit, match="bench step: cannot check out --old-rev no-such-rev"):
        step.main(["--old-rev", "no-such-rev", *SMALL])
    assert _worktrees_under(own_tmp) == []
    with pytest.raises(SystemExit, match="--old-rev needs a git revision"):
        step.main(["--old-rev"])
