"""Bug synthesis (envs/swe/synth.py): mutants kept only when they break tests, deterministic by
seed, records the env runs; graded through the real env and swebench in Docker."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envs.swe import bundled, grading, synth
from envs.swe.mutate import mutants

ROOT = Path(__file__).resolve().parents[3]
CODE = textwrap.dedent('''\
    def clamp(x, lo, hi):
        if x < lo:
            return lo
        if x > hi:
            return hi
        return x


    def untested(n):
        return n * 2 + 1
    ''')
TESTS = textwrap.dedent('''\
    from tinyclamp import clamp


    def test_low():
        assert clamp(-5, 0, 10) == 0


    def test_high():
        assert clamp(50, 0, 10) == 10, "above the range gives hi"


    def test_inside():
        assert clamp(5, 0, 10) == 5
    ''')


@pytest.fixture
def tiny_repo(tmp_path) -> Path:
    """A user's own small git repository: one tested function, one untested."""
    repo = tmp_path / "tinyclamp-repo"
    (repo / "tinyclamp").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "tinyclamp" / "__init__.py").write_text(CODE)
    (repo / "tests" / "test_clamp.py").write_text(TESTS)
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"],
                ["-c", "user.name=You", "-c", "user.email=you@example.com", "commit", "-q", "-m", "clamp"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, capture_output=True)
    return repo


def _found(repo: Path, seed: int = 0, per_function: int = 10) -> list[tuple]:
    base, found = synth.find_bugs(repo, seed, per_function, log=lambda s: None)
    return [(m.path, m.function, m.kind, m.line, m.text, sorted(t for t, s in run.items() if s != "PASSED"))
            for m, run in found]


def test_mutation_kinds_stay_inside_one_function():
    ms = mutants("m.py", CODE)
    kinds = {m.kind for m in ms["clamp"]}
    assert {"compare", "drop_if"} <= kinds and {m.kind for m in ms["untested"]} == {"arith", "off_by_one"}
    for m in ms["clamp"]:  # one change, the other function untouched
        assert m.text != CODE and m.text.endswith(CODE[CODE.index("def untested"):])
    assert mutants("m.py", CODE) == ms  # deterministic


def test_kept_mutants_break_tests_and_are_deterministic(tiny_repo):
    found = _found(tiny_repo)
    assert found == _found(tiny_repo)  # same seed, same instances in the same order
    assert found and all(f[1] == "clamp" for f in found)  # an untested function's mutants break nothing: dropped
    assert all(f[5] for f in found)  # each kept mutant fails a test
    assert not any("if x <= lo:" in f[4] for f in found)  # equivalent at the boundary the tests use: breaks nothing
    assert any("if x < lo:" not in f[4] and f[2] == "drop_if" for f in found)


def test_own_repo_yields_records_that_the_reverse_diff_fixes(tiny_repo, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_CACHE", str(tmp_path / "cache"))
    records = synth.synthesize(tiny_repo, "tinyclamp", "local/tinyclamp", "local", "k1", 0, 2, log=lambda s: None)
    assert records and len({r["instance_id"] for r in records}) == len(records)
    for r in records:
        f2p, p2p = grading.as_list(r["FAIL_TO_PASS"]), grading.as_list(r["PASS_TO_PASS"])
        assert f2p and sorted(f2p + p2p) == sorted(f"tests/test_clamp.py::{t}" for t in ("test_low", "test_high", "test_inside"))
        assert r["test_patch"] == "" and f2p[0] in r["problem_statement"]
        added = [ln[1:] for ln in r["patch"].splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        assert added and not any(a.strip() in r["problem_statement"] for a in added if a.strip())  # not the answer
        git = Path(r["synth"]["git"])
        subprocess.run(["git", "-C", str(git), "checkout", "-q", r["base_commit"]], check=True)
        assert (git / "tinyclamp" / "__init__.py").read_text() != CODE  # the base holds the bug ...
        subprocess.run(["git", "-C", str(git), "apply", "-"], input=r["patch"], text=True, check=True)
        assert (git / "tinyclamp" / "__init__.py").read_text() == CODE  # ... and the gold patch removes it
        subprocess.run(["git", "-C", str(git), "checkout", "-q", "-f", "main"], check=True)
        parents = subprocess.run(["git", "-C", str(git), "rev-list", "--count", r["base_commit"]],
                                 capture_output=True, text=True, check=True).stdout.strip()
        assert parents == "1"  # no history: the original is not reachable from the base
    again = synth.synthesize(tiny_repo, "tinyclamp", "local/tinyclamp", "local", "k1", 0, 2,
                             log=lambda s: pytest.fail("a cached synthesis ran again"))
    assert again == records


def test_cli_needs_name_with_repo(capsys):
    assert synth.main(["--out", "x.jsonl", "--repo", "."]) == 1
    assert capsys.readouterr().err.strip() == "envs.swe.synth: --repo needs --name"


@pytest.mark.docker
def test_bundled_repo_instances_graded_through_the_env(tmp_path, monkeypatch):
    from envs.swe.env import SWEEnv

    monkeypatch.setenv("OPENCLAW_CACHE", str(tmp_path / "cache"))
    src = bundled.REPOS / "inikit"
    records = synth.synthesize(src, "inikit", "openclaw/inikit", bundled.OWNER, "test", 0, 1, log=lambda s: None)
    assert len(records) >= 3 and all(r["repo"] == "openclaw/inikit" for r in records)
    path = tmp_path / "synth.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:2]))
    env = SWEEnv(instances=str(path))
    try:
        for r in records[:2]:
            env.reset(options={"task_id": r["instance_id"]})
            tools = [json.loads(a.split("<tool_call>")[1].split("</tool_call>")[0])["name"] for a in env.task.oracle]
            assert tools[0] == "bash" and "edit" in tools and tools[-1] == "submit"  # tests, code, edit, tests, submit
            first = None
            for action in env.task.oracle:
                _, reward, term, _, info = env.step(action)
                assert info["status"] == "ok", info["next_state"].content
                first = first or info["next_state"]
            assert "failed" in first.content and first.data["tests"]["failed"] > 0  # the failing tests fail at the base
            assert term and reward == 1.0 and info["next_state"].data["resolved"]
            image = env.image
            from envs.sandbox import Limits, open_sandbox

            with open_sandbox("docker", image, Limits(), workdir=grading.WORKDIR, user="agent", pool_size=0) as sb:
                empty = grading.grade(sb, r, "", image)
            assert not empty.resolved and empty.report["tests_status"]["FAIL_TO_PASS"]["failure"]
    finally:
        env.close()


@pytest.mark.docker
@pytest.mark.slow
def test_cli_on_own_repo_builds_its_image(tiny_repo, tmp_path):
    out = tmp_path / "own.jsonl"
    p = subprocess.run([sys.executable, "-m", "envs.swe.synth", "--repo", str(tiny_repo), "--name", "tinyclamp-synth",
                        "--per-function", "1", "--out", str(out), "--replace"], cwd=ROOT, capture_output=True, text=True,
                       timeout=900, env={**__import__("os").environ, "OPENCLAW_CACHE": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records and all(r["base_image"].startswith("openclaw/swe-own-tinyclamp-synth:") for r in records)
    from envs.swe.env import SWEEnv

    env = SWEEnv(instances=str(out))
    try:
        env.reset(options={"task_id": records[0]["instance_id"]})
        for action in env.task.oracle:
            _, reward, term, _, info = env.step(action)
        assert term and reward == 1.0, info["next_state"].content
    finally:
        env.close()


def test_a_hanging_mutant_does_not_poison_its_worker(tiny_repo, tmp_path):
    from envs.swe.mutant_tests import Worker, copy_repo

    copy = tmp_path / "copy"
    copy_repo(tiny_repo, copy)
    worker = Worker(copy, ["tests"])
    path = "tinyclamp/__init__.py"
    try:
        hang = "import time\nwhile True:\n    time.sleep(1)\n"
        assert worker.run(path, hang, timeout=5).broken  # killed after 5 s, counted as not run
        assert (copy / path).read_text() == CODE  # the copy holds the original again
        again = worker.run(path, None, timeout=60)  # the fresh worker tests the original, not the hang
        assert not again.broken and again and set(again.values()) == {"PASSED"}
    finally:
        worker.close()
