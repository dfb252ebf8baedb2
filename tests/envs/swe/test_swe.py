"""SWE env on the real Docker engine: gold / empty / oracle grading, bad actions, check_env."""
from __future__ import annotations

import json
import subprocess

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from envs.sandbox import Limits, open_sandbox
from envs.sandbox.shell import bash_quote
from envs.swe import bundled, grading
from envs.swe.env import SWEEnv, pytest_counts
from envs.tool_calls import render_tool_call

pytestmark = pytest.mark.docker
FAST = ["openclaw__datekit-2", "openclaw__exprcalc-3", "openclaw__minigraph-4"]
ALL = [r["instance_id"] for r in bundled.instances()]


def _record(iid: str) -> dict:
    return next(r for r in bundled.instances() if r["instance_id"] == iid)


def _grade(iid: str, patch: str, **overrides) -> grading.Grade:
    rec = {**_record(iid), **overrides}
    image = bundled.instance_image(rec)
    with open_sandbox("docker", image, Limits(), workdir=grading.WORKDIR, pool_size=1) as sb:
        return grading.grade(sb, rec, patch, image)


def _oracle_episode(env: SWEEnv, iid: str) -> tuple[float, dict]:
    env.reset(options={"task_id": iid})
    for action in env.task.oracle:
        _, reward, term, trunc, info = env.step(action)
        assert info["status"] == "ok", info["next_state"].content
    assert term and not trunc
    return reward, info


def _check_instance(env: SWEEnv, iid: str) -> None:
    gold = _grade(iid, _record(iid)["patch"])
    assert gold.resolved, gold.log[-2000:]
    empty = _grade(iid, "")
    assert not empty.resolved and empty.report["tests_status"]["FAIL_TO_PASS"]["failure"], empty.log[-2000:]
    reward, info = _oracle_episode(env, iid)
    assert reward == 1.0 and info["next_state"].data["resolved"], info["next_state"].content
    assert info["next_state"].kind == "tests" and info["next_state"].data["verdict"] == 1


@pytest.fixture(scope="module")
def env():
    e = SWEEnv()
    yield e
    e.close()


def test_bundled_set_shape():
    repos = {r["repo"] for r in bundled.instances()}
    assert len(ALL) >= 20 and len(repos) >= 4
    for r in bundled.instances():
        assert json.loads(r["FAIL_TO_PASS"]) and json.loads(r["PASS_TO_PASS"])
        assert r["patch"].startswith("diff --git") and r["test_patch"].startswith("diff --git")


@pytest.mark.parametrize("iid", FAST)
def test_instance_fast(env, iid):
    _check_instance(env, iid)


@pytest.mark.full
@pytest.mark.parametrize("iid", [i for i in ALL if i not in FAST])
def test_instance_full(env, iid):
    _check_instance(env, iid)


def test_unresolving_submit_and_verdicts(env):
    env.reset(options={"task_id": "openclaw__exprcalc-1"})
    _, _, _, _, info = env.step(render_tool_call("bash", {"command": "python3 -m pytest -q -p no:cacheprovider tests/test_exprcalc.py"}))
    ns = info["next_state"]
    assert ns.kind == "shell" and ns.role == "tool" and ns.data["exit_code"] == 0
    assert ns.data["tests"] == {"passed": 10, "failed": 0} and ns.data["verdict"] == 1
    _, _, _, _, info = env.step(render_tool_call("bash", {"command": "ls no-such-dir"}))
    assert info["status"] == "ok" and info["next_state"].data["verdict"] == -1 and info["next_state"].data["exit_code"] != 0
    _, reward, term, _, info = env.step(render_tool_call("submit", {}))
    assert term and reward == -1.0 and not info["next_state"].data["resolved"]
    assert "FAIL_TO_PASS: 0 passed, 2 failed" in info["next_state"].content


def test_bad_actions(env):
    env.reset(options={"task_id": "openclaw__inikit-2"})
    cases = [
        (render_tool_call("edit", {"command": "view", "path": "nope.py"}), "env_error", "does not exist"),
        (render_tool_call("edit", {"command": "str_replace", "path": "nope.py", "old_str": "a", "new_str": "b"}), "env_error", "does not exist"),
        (render_tool_call("edit", {"command": "str_replace", "path": "inikit/config.py", "old_str": "return", "new_str": "x"}), "env_error", "times in"),
        (render_tool_call("edit", {"command": "str_replace", "path": "inikit/config.py", "old_str": "zzz", "new_str": "x"}), "env_error", "not found"),
        (render_tool_call("edit", {"command": "create", "path": "inikit/config.py", "file_text": ""}), "env_error", "already exists"),
        (render_tool_call("edit", {"command": "delete", "path": "x"}), "env_error", "must be one of"),
        (render_tool_call("rm", {}), "invalid_action", "unknown tool"),
        ('<tool_call>{"name": "bash"', "invalid_action", "never closed"),
        ("I am thinking.", "invalid_action", "no tool calls"),
    ]
    for action, status, words in cases:
        _, reward, term, trunc, info = env.step(action)
        assert info["status"] == status and words in info["next_state"].content, info["next_state"].content
        assert info["next_state"].data["verdict"] == -1 and reward == 0 and not term
    env.close()


def _submit_with_bfs_body(env: SWEEnv, body: str) -> tuple[float, dict]:
    env.reset(options={"task_id": "openclaw__minigraph-1"})
    fix = {"command": "str_replace", "path": "minigraph/graph.py", "old_str": "    def bfs(self, start: Hashable) -> Iterator[Hashable]:\n",
           "new_str": "    def bfs(self, start: Hashable) -> Iterator[Hashable]:\n" + body}
    assert env.step(render_tool_call("edit", fix))[4]["status"] == "ok"
    _, reward, term, _, info = env.step(render_tool_call("submit", {}))
    assert term  # submit ends the episode, graded or not
    return reward, info


def test_hanging_command_and_hanging_tests():
    env = SWEEnv(command_timeout=2, test_cpu_s=4, test_wall_s=120)
    try:
        env.reset(options={"task_id": "openclaw__minigraph-1"})
        _, _, _, _, info = env.step(render_tool_call("bash", {"command": "sleep 60"}))
        assert info["status"] == "env_error" and info["next_state"].data["timed_out"]
        assert info["next_state"].data["verdict"] == -1 and "timed out" in info["next_state"].content
        # a "fix" that makes the test run spin: stopped at its CPU limit, not resolved, no crash
        reward, info = _submit_with_bfs_body(env, "        while True:\n            pass\n")
        assert reward == -1.0 and info["status"] == "env_error"
        assert info["next_state"].data["timed_out"] and "its 4 s of CPU time" in info["next_state"].content
    finally:
        env.close()


def test_tests_that_wait_without_computing_stop_at_the_wall_limit():
    env = SWEEnv(test_cpu_s=120, test_wall_s=15)
    try:
        reward, info = _submit_with_bfs_body(env, "        import time; time.sleep(3600)\n")
        assert reward == -1.0 and info["status"] == "env_error"
        assert info["next_state"].data["timed_out"] and "no result in 15 s" in info["next_state"].content
    finally:
        env.close()


@pytest.mark.slow
def test_a_slow_machine_does_not_fail_a_correct_patch():
    """The grade's limit is CPU time: at 4% of a core the oracle's test run takes far longer
    than its 6 CPU seconds in wall time, and is still graded resolved."""
    env = SWEEnv(test_cpu_s=6, test_wall_s=600, cpus=0.04)
    try:
        reward, info = _oracle_episode(env, "openclaw__minigraph-1")
        assert reward == 1.0 and not info["next_state"].data["timed_out"]
    finally:
        env.close()


def test_patch_that_does_not_apply():
    rec = _record("openclaw__datekit-1")
    bad = rec["patch"].replace("return year % 4 == 0 and year % 100 != 0", "return something_else")
    g = _grade("openclaw__datekit-1", bad)
    assert not g.patch_applied and not g.resolved and "does not apply" in g.summary()


# ---- grading ignores test infrastructure the agent touched --------------------------------------
FORCE_PASS_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None
"""
# Loaded at interpreter start wherever the repository is on sys.path then (an editable install).
FORCE_PASS_SITECUSTOMIZE = """import _pytest.reports as r

_make = r.TestReport.from_item_and_call.__func__


def _passed(cls, item, call):
    report = _make(cls, item, call)
    report.outcome, report.longrepr = "passed", None
    return report


r.TestReport.from_item_and_call = classmethod(_passed)
"""


def _new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def test_conftest_forcing_passes_is_reverted_in_an_episode(env):
    env.reset(options={"task_id": FAST[0]})
    for path in ("conftest.py", "tests/conftest.py"):
        _, _, _, _, info = env.step(render_tool_call("edit", {"command": "create", "path": path, "file_text": FORCE_PASS_CONFTEST}))
        assert info["status"] == "ok", info["next_state"].content
    _, reward, term, _, info = env.step(render_tool_call("submit", {}))
    data = info["next_state"].data
    assert term and reward == -1.0 and not data["resolved"], info["next_state"].content
    assert data["reverted"] == ["conftest.py", "tests/conftest.py"] and "reverted" in info["next_state"].content


def test_sitecustomize_forcing_passes_is_reverted():
    iid = FAST[0]
    editable = {"test_cmd": f"PYTHONPATH={grading.WORKDIR} {grading.DEFAULT_TEST_CMD}"}  # as an editable install
    g = _grade(iid, _new_file("sitecustomize.py", FORCE_PASS_SITECUSTOMIZE) + _new_file("datekit/x.pth", "import os"), **editable)
    assert not g.resolved and g.report["tests_status"]["FAIL_TO_PASS"]["failure"], g.log[-2000:]
    assert g.reverted == ["datekit/x.pth", "sitecustomize.py"]
    assert _grade(iid, _record(iid)["patch"], **editable).resolved  # the editable-style command itself works


def test_real_fix_with_harmless_test_changes_is_still_resolved():
    iid = FAST[0]
    harmless = _new_file("tests/conftest.py", "# shared fixtures will go here\n") + _new_file("pytest.ini", "[pytest]\naddopts = -q\n")
    g = _grade(iid, _record(iid)["patch"] + harmless)
    assert g.resolved, g.log[-2000:]
    assert g.reverted == ["pytest.ini", "tests/conftest.py"]


# ---- grading runs the real test runner, not a module the patch put in its place -----------------
# Prints a PASSED line for every test function of the test files pytest was given, and exits 0.
FAKE_RUNNER = """import ast, os, sys
for f in sys.argv[1:]:
    if f.endswith(".py") and os.path.isfile(f):
        for n in ast.parse(open(f).read()).body:
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test"):
                print(f"PASSED {f}::{n.name}")
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.parametrize("path", ["pytest.py", "argparse.py"])  # pytest itself; a stdlib module it imports
def test_module_shadowing_the_test_runner_is_reverted(path):
    g = _grade(FAST[0], _new_file(path, FAKE_RUNNER))
    assert not g.resolved and g.report["tests_status"]["FAIL_TO_PASS"]["failure"], g.log[-2000:]
    assert g.reverted == [path]


def test_working_directory_is_not_first_on_sys_path():
    """The layer under the revert: run as the eval script is, python3 in /testbed imports pytest
    and the stdlib from their own places even where /testbed has modules of those names, and
    still finds the repository's package in /testbed."""
    rec = _record(FAST[0])
    image = bundled.instance_image(rec)
    probe = "import argparse, pytest, datekit; print(argparse.__file__, pytest.__file__, datekit.__file__)"
    with open_sandbox("docker", image, Limits(), workdir=grading.WORKDIR, user="agent", pool_size=0) as sb:
        sb.write_file(f"{grading.WORKDIR}/pytest.py", FAKE_RUNNER)
        sb.write_file(f"{grading.WORKDIR}/argparse.py", FAKE_RUNNER)
        r = sb.exec(f"{grading.CLEAN_ENV} python3 -c {bash_quote(probe)}", timeout=60, workdir=grading.WORKDIR)
    assert r.ok, r.stdout + r.stderr
    argparse_file, pytest_file, datekit_file = r.stdout.split()
    assert argparse_file.startswith("/usr/lib/python3") and pytest_file.startswith("/opt/openclaw-pytest/")
    assert datekit_file == f"{grading.WORKDIR}/datekit/__init__.py"


# ---- the images hold nothing after the base commit ----------------------------------------------
@pytest.mark.parametrize("name", bundled.repo_names())
def test_image_holds_no_history_after_the_base(name):
    """The agent cannot reach the fix through git: one commit (the base, without parents), one
    branch, no tag, stash or reflog entry past it, no object the base does not reach, and
    neither the fixed file nor the bug's tests as a blob (their content is the finished library's)."""
    bug = bundled.load_bugs(name)["bugs"][-1]
    rec = _record(f"{bundled.OWNER}__{name}-{bug['id']}")
    base = rec["base_commit"]
    finished = [bundled.REPOS / name / f for f in (bug["file"], *bug["tests"])]
    blobs = [subprocess.run(["git", "hash-object", str(f)], capture_output=True, text=True, check=True).stdout.strip()
             for f in finished]
    script = ("git rev-list --all --reflog; echo ==; git for-each-ref --format='%(refname)'; git stash list; echo ==; "
              "git cat-file --batch-all-objects --batch-check='%(objectname)' | sort; echo ==; "
              f"git rev-list --objects {base} | cut -d' ' -f1 | sort; echo ==; "
              + "".join(f"git cat-file -e {b} 2>/dev/null && echo {b}; " for b in blobs) + "true")
    with open_sandbox("docker", bundled.instance_image(rec), Limits(), workdir=grading.WORKDIR, user="agent", pool_size=0) as sb:
        r = sb.exec(script, timeout=60, workdir=grading.WORKDIR, max_output=1 << 20)
    assert r.ok, r.stdout + r.stderr
    commits, refs, objects, reachable, found = (part.split() for part in r.stdout.split("==\n"))
    assert commits == [base] and refs == ["refs/heads/main"]
    assert objects == reachable and len(objects) > 3
    assert found == [], f"the finished library's {[str(f) for f, b in zip(finished, blobs) if b in found]} is in the image"


def test_pytest_counts():
    assert pytest_counts("...\n===== 2 failed, 5 passed in 0.12s =====\n") == {"passed": 5, "failed": 2}
    assert pytest_counts("7 passed, 1 error in 3.00s") == {"passed": 7, "failed": 1}
    assert pytest_counts("no summary here") is None


def test_check_env_and_registration():
    env = gymnasium.make("openclaw/SWE-v0").unwrapped
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.heavy
def test_32_concurrent_episodes_share_images_and_leave_nothing():
    from experiments.bench.swe import containers_left, run_oracle_episodes

    ids = [r["instance_id"] for r in bundled.instances()]
    builds_before = len(bundled.builds)
    seconds, episodes, unresolved, images = run_oracle_episodes(32, 1, ids)
    assert episodes == 32 and unresolved == []
    assert len(images) == len(set(ids))  # one image per instance (on one shared pytest layer)
    assert len(bundled.builds) - builds_before <= len(images) + 1  # each built once at most
    assert containers_left() == 0
