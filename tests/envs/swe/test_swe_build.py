"""envs.swe.build (SWE on your own repository): docs/swe_own_repo.md's commands run as written (a
repository made there, its image built, the instance failing before the gold patch and resolved
after it by the same grading as the bundled instances), and bad input gives one line."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envs.swe import build, grading
from envs.swe.env import SWEEnv
from envs.tool_calls import render_tool_call
from tests.cli import REPO

DOC = REPO / "docs" / "swe_own_repo.md"
DEMO = "/tmp/openclaw-swe-demo"  # the page's folder; the tests use their own
NAME = "tinystats-1"  # the page's instance name; the tests use their own, so a reader's image stays


def blocks() -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def run_block(block: str, demo: Path, name: str, timeout: float = 600) -> subprocess.CompletedProcess:
    assert DEMO in block or "$demo" in block
    script = block.replace(DEMO, str(demo)).replace(NAME, name).replace("python -m ", f"{sys.executable} -m ")
    return subprocess.run(["bash", "-e", "-c", f"demo={demo}\n{script}"], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def demo(tmp_path) -> Path:
    """The page's repository (section 1), made in tmp_path."""
    p = run_block(blocks()[0], tmp_path / "demo", NAME, timeout=60)
    assert p.returncode == 0, p.stderr
    return tmp_path / "demo"


def one_line_error(capsys, argv: list[str]) -> str:
    assert build.main(argv) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("[images] ")]  # build progress
    assert len(lines) == 1 and lines[0].startswith("envs.swe.build: "), lines
    return lines[0]


def test_split_patch():
    diff = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
                   for p in ("pkg/core.py", "tests/test_core.py", "conftest.py", "README.md"))
    patch, test_patch = build.split_patch(diff)
    assert grading.patch_files(patch) == ["pkg/core.py", "README.md"]
    assert grading.patch_files(test_patch) == ["tests/test_core.py", "conftest.py"]


def test_bad_input_is_one_line(demo, tmp_path, capsys):
    repo, out = demo / "tinystats", tmp_path / "instances.jsonl"
    base = ["--name", "t1", "--out", str(out)]
    (tmp_path / "plain").mkdir()
    assert "is not the top folder of a git repository" in one_line_error(capsys, ["--repo", str(tmp_path / "plain"), "--fix", "fix", *base])
    assert "is not the top folder" in one_line_error(capsys, ["--repo", str(repo / "tests"), "--fix", "fix", *base])
    (tmp_path / "x.bundle").write_text("not a bundle\n")
    assert "neither a git repository nor a git bundle" in one_line_error(capsys, ["--repo", str(tmp_path / "x.bundle"), "--fix", "fix", *base])
    assert "no such file or folder" in one_line_error(capsys, ["--repo", str(tmp_path / "missing"), "--fix", "fix", *base])
    assert "--fix nosuch: no such commit" in one_line_error(capsys, ["--repo", str(repo), "--fix", "nosuch", *base])
    assert "--base-commit 0123abc: no such commit" in one_line_error(
        capsys, ["--repo", str(repo), "--fix", "fix", "--base-commit", "0123abc", *base])
    assert "changes nothing at the base commit" in one_line_error(capsys, ["--repo", str(repo), "--fix", "main", *base])
    tests_only = tmp_path / "tests.diff"
    tests_only.write_text(subprocess.run(["git", "-C", str(repo), "diff", "main", "fix", "--", "tests"],
                                         capture_output=True, text=True, check=True).stdout)
    assert "needs --problem" in one_line_error(capsys, ["--repo", str(repo), "--patch", str(tests_only), *base])
    assert "touches only tests" in one_line_error(
        capsys, ["--repo", str(repo), "--patch", str(tests_only), "--problem", "p", *base])
    assert "a Docker name" in one_line_error(capsys, ["--repo", str(repo), "--fix", "fix", "--name", "Bad/Name", "--out", str(out)])
    record = {k: "x" for k in ("repo", "base_commit", "test_patch", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS")}
    out.write_text(json.dumps({**record, "instance_id": "t1"}) + "\n")
    assert "already has that instance (pass --replace" in one_line_error(capsys, ["--repo", str(repo), "--fix", "fix", *base])


@pytest.fixture
def own_name():
    from envs.sandbox import images
    from envs.sandbox.engine import client

    name = f"tinystats-test-{os.getpid()}"
    yield name
    repo = f"{images.REPO}/{build.IMAGE_PREFIX}{name}"
    for img in client().images.list(name=repo):
        images.remove_image(img.tags[0])
    assert not client().images.list(name=repo)


@pytest.mark.docker
@pytest.mark.slow
def test_walkthrough_builds_an_instance_graded_like_the_bundled_ones(demo, own_name):
    make, build_cmd, run_cmd = blocks()
    p = run_block(build_cmd, demo, own_name)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "the gold patch resolves it" in p.stdout
    (record,) = [json.loads(line) for line in (demo / "instances.jsonl").read_text().splitlines()]
    assert record["instance_id"] == own_name and record["image"].startswith(f"openclaw/swe-own-{own_name}:")
    assert json.loads(record["FAIL_TO_PASS"]) == ["tests/test_stats.py::test_median_even"]
    assert json.loads(record["PASS_TO_PASS"]) == ["tests/test_stats.py::test_mean", "tests/test_stats.py::test_median_odd"]
    assert grading.patch_files(record["patch"]) == ["tinystats/__init__.py"]
    assert grading.patch_files(record["test_patch"]) == ["tests/test_stats.py"]
    assert record["problem_statement"] == (demo / "issue.md").read_text()

    env = SWEEnv(instances=str(demo / "instances.jsonl"), pool_size=0)
    try:
        env.reset(options={"task_id": own_name})
        # the fix is not in the image: only the base commit's history is
        log = env.step(render_tool_call("bash", {"command": "git log --all --format=%s"}))[4]["next_state"].content
        assert "tinystats: mean and median" in log and "average the two middle" not in log
        _, reward, done, _, info = env.step(render_tool_call("submit", {}))  # no change: the bug stays
        status = info["next_state"].data["tests_status"]
        assert done and reward == -1.0 and status["FAIL_TO_PASS"]["failure"] == ["tests/test_stats.py::test_median_even"]
        assert len(status["PASS_TO_PASS"]["success"]) == 2
    finally:
        env.close()

    run_dir = demo / "run"
    p = run_block(run_cmd.strip() + f" run_dir={run_dir} progress=false wandb.mode=disabled", demo, own_name)
    assert p.returncode == 0, p.stderr[-3000:]
    (row,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert row["outcome_mean"] == 1.0 and row["episodes"] == 1  # the oracle's gold patch, graded resolved


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("install, said", [
    ("pip install requests", "the install command needs the network (Could not find a version that satisfies the requirement requests)"),
    ("python3 -c 'raise SystemExit(\"no config found\")'", "failed (exit 1): no config found"),
])
def test_failing_install_is_one_line(demo, own_name, capsys, install, said):
    err = one_line_error(capsys, ["--repo", str(demo / "tinystats"), "--name", own_name, "--fix", "fix",
                                  "--install", install, "--out", str(demo / "instances.jsonl")])
    assert said in err
    assert not (demo / "instances.jsonl").exists()
