"""Terminal env end to end on the real Docker engine (and bubblewrap): oracles, doing nothing,
bad actions, check_env, 64 concurrent oracle episodes; the task loader without a sandbox."""
from __future__ import annotations

import asyncio
import time
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the envs)
from envs.terminal.env import TerminalEnv
from envs.sandbox import open_sandbox
from envs.terminal.tasks import BUNDLED, load_suite, load_task, oracle_actions
from envs.tool_calls import parse_action, render_tool_call

SUITE = load_suite()
ALL_IDS = sorted(SUITE)
FAST_IDS = ["count-error-lines", "git-revert-bad-commit", "csv-filter-adults", "kill-worker", "image-read-config"]
SUBMIT = render_tool_call("submit", {})


def bash(command: str, **kw) -> str:
    return render_tool_call("bash", {"command": command, **kw})


@pytest.fixture(scope="module")
def docker_env():
    e = TerminalEnv(sandbox="docker", pool_size=2)
    yield e
    e.close()


def _oracle_and_nothing(env: TerminalEnv, task_id: str) -> None:
    env.reset(options={"task_id": task_id})
    for action in env.task.oracle:
        _, reward, term, trunc, info = env.step(action)
        assert info["status"] == "ok", (task_id, info["next_state"].content)
    assert term and not trunc
    assert reward == 1.0 and info["next_state"].data["reward"] == 1.0, (task_id, info["next_state"].data["verifier_log"])
    assert info["next_state"].kind == "tests" and info["next_state"].data["verdict"] == 1
    env.reset(options={"task_id": task_id})
    _, reward, term, _, info = env.step(SUBMIT)
    assert term and info["status"] == "ok"
    assert reward == -1.0 and info["next_state"].data["reward"] == 0.0, (task_id, "doing nothing passed")
    assert info["next_state"].data["verdict"] == -1


# ---- the task suite (no sandbox) ---------------------------------------------------------------
def test_bundled_suite_is_complete():
    assert len(SUITE) >= 40
    for tid, task in SUITE.items():
        assert task.prompt and len(task.oracle) == 2, tid
        assert '"name": "submit"' in task.oracle[-1]
        assert task.meta["setup"] or task.meta["dockerfile"], tid
        assert "test_outputs.py" in (BUNDLED / tid / "tests" / "test.sh").read_text()
    assert sum(t.meta["dockerfile"] for t in SUITE.values()) >= 2
    # bwrap cannot build images: it offers only the setup.sh tasks
    assert len(TerminalEnv(sandbox="bwrap").task_ids()) == sum(not t.meta["dockerfile"] for t in SUITE.values())


def test_loader_reads_a_user_folder_and_rejects_bad_ones(tmp_path):
    task = tmp_path / "suite" / "hello"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Write hi to a.txt\n")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (task / "task.toml").write_text("[verifier]\ntimeout_sec = 7\n")
    suite = load_suite(tmp_path / "suite")
    assert list(suite) == ["hello"] and suite["hello"].oracle == []
    assert suite["hello"].meta["verifier_timeout_s"] == 7.0
    assert list(load_suite(task)) == ["hello"]  # a single task folder works too
    with pytest.raises(ValueError, match="missing instruction.md"):
        load_task(tmp_path / "suite")
    with pytest.raises(ValueError, match="no task folders"):
        load_suite(tmp_path / "suite" / "hello" / "tests")
    (task / "task.toml").write_text("[verifier\n")
    with pytest.raises(ValueError, match="task.toml"):
        load_task(task)


# ---- oracle and do-nothing runs ----------------------------------------------------------------
@pytest.mark.docker
@pytest.mark.parametrize("task_id", FAST_IDS)
def test_oracle_passes_and_nothing_fails(docker_env, task_id):
    _oracle_and_nothing(docker_env, task_id)


@pytest.mark.docker
@pytest.mark.full
@pytest.mark.parametrize("task_id", [t for t in ALL_IDS if t not in FAST_IDS])
def test_every_task_oracle_passes_and_nothing_fails(docker_env, task_id):
    _oracle_and_nothing(docker_env, task_id)


@pytest.mark.bwrap
def test_a_multi_line_oracle_is_plain_lines_that_cannot_end_or_move_the_agents_shell():
    solve = "#!/bin/bash\nset -e\ncd /tmp\necho done > marker\nexit 3\n"
    call, submit = (parse_action(a).calls[0] for a in oracle_actions(solve, None))
    assert call.name == "bash" and submit.name == "submit"
    assert call.arguments["command"] == "(\nset -e\ncd /tmp\necho done > marker\nexit 3\n)"
    sb = open_sandbox("bwrap")
    try:
        where = sb.exec("pwd").stdout
        assert sb.exec(call.arguments["command"]).exit_code == 3
        assert sb.exec("pwd").stdout == where and sb.exec("cat /tmp/marker").stdout == "done\n"
    finally:
        sb.close()
    (one_line,) = (parse_action(a).calls[0] for a in oracle_actions("# sort it\nsort -o f f\n", None)[:1])
    assert one_line.arguments == {"command": "sort -o f f"}


@pytest.mark.bwrap
def test_bwrap_backend_runs_setup_tasks():
    env = TerminalEnv(sandbox="bwrap")
    try:
        for tid in ("git-feature-branch", "json-deep-merge"):
            _oracle_and_nothing(env, tid)
        with pytest.raises(ValueError, match="needs sandbox='docker'"):
            env.reset(options={"task_id": "image-read-config"})
    finally:
        env.close()


# ---- the shell's next state and bad actions ----------------------------------------------------
@pytest.mark.docker
def test_shell_state_persists_and_reports(docker_env):
    docker_env.reset(options={"task_id": "merge-numbers"})
    _, reward, term, trunc, info = docker_env.step(bash("mkdir -p sub && cd sub && export X=7 && echo out && echo err >&2"))
    ns = info["next_state"]
    assert (info["status"], reward, term, trunc) == ("ok", 0.0, False, False)
    assert ns.role == "tool" and ns.kind == "shell"
    assert ns.data["exit_code"] == 0 and ns.data["stdout"] == "out\n" and ns.data["stderr"] == "err\n"
    assert ns.data["cwd"].endswith("/sub") and ns.data["verdict"] == 1
    assert "out" in ns.content and "stderr:\nerr" in ns.content and "exit code 0" in ns.content
    _, _, _, _, info = docker_env.step(bash("echo $X; ls /nonexistent"))
    ns = info["next_state"]
    assert info["status"] == "ok" and ns.data["stdout"] == "7\n" and ns.data["exit_code"] == 2
    assert ns.data["verdict"] == -1 and ns.data["cwd"].endswith("/sub")


@pytest.mark.docker
def test_bad_actions(docker_env):
    docker_env.reset(options={"task_id": "merge-numbers"})
    cases = {
        "": "no tool call",
        "let me think": "no tool call",
        bash(""): "the command is empty",
        bash("   \n"): "the command is empty",
        bash("x" * (5 << 20)): "the limit is",
        render_tool_call("bash", {"cmd": "ls"}): "unexpected argument",
        render_tool_call("bash", {"command": 5}): "string argument 'command'",
        bash("ls", timeout=-1): "positive number",
        bash("ls", timeout="soon"): "positive number",
        render_tool_call("python", {"code": "1"}): "unknown tool",
        '<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>': "not valid JSON",
        "<tool_call>": "never closed",
        bash("ls") + bash("pwd"): "exactly one per turn",
    }
    for action, message in cases.items():
        _, reward, term, trunc, info = docker_env.step(action)
        assert info["status"] == "invalid_action", (action[:80], info)
        assert message in info["next_state"].content and info["next_state"].data["verdict"] == -1
        assert (reward, term, trunc) == (0.0, False, False)
        docker_env.turn = 0  # stay below the turn limit while trying many bad actions


@pytest.mark.docker
def test_never_returning_command_is_killed_and_shell_lives_on(docker_env):
    docker_env.reset(options={"task_id": "merge-numbers"})
    t0 = time.monotonic()
    _, _, term, _, info = docker_env.step(bash("cd /tmp; sleep 1000", timeout=1))
    assert time.monotonic() - t0 < 10
    ns = info["next_state"]
    assert info["status"] == "env_error" and not term
    assert ns.data["timed_out"] and ns.data["exit_code"] is None and ns.data["verdict"] == -1
    assert "killed" in ns.content
    _, _, _, _, info = docker_env.step(bash("echo alive; pwd"))
    assert info["status"] == "ok" and info["next_state"].data["stdout"] == "alive\n/tmp\n"
    # a loop in the shell itself: the shell is killed and restarted, and the next state says so
    _, _, _, _, info = docker_env.step(bash("while true; do :; done", timeout=1))
    assert info["status"] == "env_error" and info["next_state"].data["timed_out"]
    assert info["next_state"].data["shell_restarted"] and "restarted" in info["next_state"].content
    _, _, _, _, info = docker_env.step(bash("echo back"))
    assert info["status"] == "ok" and info["next_state"].data["stdout"] == "back\n"


@pytest.mark.docker
def test_binary_and_flooding_output_are_safe(docker_env):
    docker_env.reset(options={"task_id": "merge-numbers"})
    _, _, _, _, info = docker_env.step(bash("head -c 4000 /dev/urandom; printf '\\x00\\x01\\xff\\n'"))
    ns = info["next_state"]
    assert info["status"] == "ok" and ns.data["exit_code"] == 0
    assert "\x00" not in ns.content and "\x01" not in ns.content and ns.content.encode("utf-8")
    _, _, _, _, info = docker_env.step(bash("yes 0123456789"))
    ns = info["next_state"]
    assert info["status"] == "env_error" and ns.data["truncated"] and ns.data["verdict"] == -1
    assert len(ns.content) <= docker_env.max_obs_chars + 200


@pytest.mark.docker
def test_turn_limit_runs_the_tests():
    env = TerminalEnv(sandbox="docker", max_turns=2, pool_size=1)
    try:
        env.reset(options={"task_id": "merge-numbers"})
        _, _, term, trunc, info = env.step(bash("echo thinking"))
        assert not term and not trunc
        _, reward, term, _, info = env.step(bash("cat parts/*.txt | sort -n -u > merged.txt"))
        assert term and reward == 1.0 and info["next_state"].data["ended_by"] == "turn limit reached"
        assert info["next_state"].data["exit_code"] == 0 and "reward 1" in info["next_state"].content
        env.reset(options={"task_id": "merge-numbers"})
        env.step(bash("cat parts/*.txt | sort -n -u > merged.txt"))
        _, reward, term, _, info = env.step("I am done.")  # a last action that is not a tool call
        assert term and reward == 1.0 and info["status"] == "invalid_action"
        assert "no tool call" in info["next_state"].content and info["next_state"].data["reward"] == 1.0
    finally:
        env.close()


@pytest.mark.docker
def test_sandbox_failure_is_infra_error(docker_env):
    docker_env.reset(options={"task_id": "merge-numbers"})
    from envs.sandbox.engine import client

    client().api.kill(docker_env._sb.id)  # the container dies under the episode
    _, reward, term, trunc, info = docker_env.step(bash("ls"))
    assert info["status"] == "infra_error" and trunc and not term and info["outcome"] is None


@pytest.mark.docker
def test_check_env():
    env = gymnasium.make("openclaw/Terminal-v0", pool_size=1).unwrapped
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(env, skip_render_check=True)
    finally:
        env.close()


# ---- many episodes at once ---------------------------------------------------------------------
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.heavy
def test_64_concurrent_oracle_episodes_pass_and_leave_no_container():
    from agent.actors import OracleActor
    from agent.rollout import EpisodeJob, Runner
    from envs.sandbox import pool, sweeper

    ids = TerminalEnv(sandbox="bwrap").task_ids()  # the setup.sh tasks: no image builds here
    jobs = [EpisodeJob(f"e{i}", ids[i % len(ids)], f"g{i}", i) for i in range(64)]
    leased = {k: p.stats()["in_use"] for k, p in pool._pools.items()}  # other tests' sandboxes in use
    made: list[TerminalEnv] = []
    runner = Runner(lambda: made.append(TerminalEnv(sandbox="docker", pool_size=64)) or made[-1], lambda job: OracleActor(),
                    n_envs=64, progress=False)
    try:
        episodes = asyncio.run(runner.run(jobs))
    finally:
        runner.close()
    bad = [(e.job.task_id, e.status, e.error, e.turns[-1].next_state.content[-300:] if e.turns else None)
           for e in episodes if e.outcome != 1.0]
    assert not bad, bad
    images = {image for env in made for image in env._images.values()}  # other tests' are theirs to check
    assert images and all(p.stats()["in_use"] == leased.get(k, 0) for k, p in pool._pools.items())  # all given back

    def left() -> list[str]:  # containers of this test's images
        return [c["Image"] for c in sweeper.containers(sweeper.run_id()) if c["Image"] in images]

    pool.shutdown_all()
    deadline = time.monotonic() + 60
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left() == []


@pytest.mark.docker
def test_random_actions_run_to_an_outcome(docker_env):
    import numpy as np

    statuses = {"ok", "invalid_action", "env_error", "infra_error", "timeout"}
    rng = np.random.default_rng(0)
    for seed in range(2):
        docker_env.reset(seed=seed, options={"task_id": "top-words"})
        for _ in range(docker_env.max_turns):
            _, reward, term, trunc, info = docker_env.step(docker_env.random_action(rng))
            assert info["status"] in statuses and info["status"] != "infra_error"
            assert info["next_state"].data["verdict"] in (-1, 0, 1)
            if term or trunc:
                break
        assert term and reward == -1.0  # random actions do not solve the task; the tests still run
