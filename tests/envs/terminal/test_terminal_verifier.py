"""The terminal verifier out of the agent's reach: each attack that once gave +1 without solving
the task, on both backends, now gets no reward; the task's own oracle still gets +1."""
from __future__ import annotations

import pytest

from envs.terminal.env import TerminalEnv
from envs.tool_calls import render_tool_call

SUBMIT = render_tool_call("submit", {})
# The task: write "solved" to answer.txt. Its test uses grep and python3, as most tests do.
TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if grep -qx solved answer.txt && python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
FAKE = "printf '#!/bin/sh\\nexit 0\\n' > {d}/grep && cp {d}/grep {d}/python3 && chmod +x {d}/grep {d}/python3"
ATTACKS = {
    "exported functions": "grep() { return 0; }; python3() { return 0; }; export -f grep python3",
    "BASH_ENV": "printf 'grep() { return 0; }\\npython3() { return 0; }\\n' > $PWD/env.sh && export BASH_ENV=$PWD/env.sh",
    "fake grep and python3 on PATH": "mkdir -p fake && " + FAKE.format(d="fake") + " && export PATH=$PWD/fake:$PATH",
    # Waits for the tests to arrive, then solves the task and writes the reward while they run.
    "lingering writer": ("nohup sh -c 'until [ -e /tests/check.py ] || [ -e /tmp/.verifier/tests/check.py ]; do sleep 0.01; done; "
                         "while :; do echo solved > answer.txt; echo 1 > /logs/verifier/reward.txt; "
                         "echo 1 > /tmp/.verifier/logs/verifier/reward.txt; sleep 0.01; done' >/dev/null 2>&1 &"),
    "pre-created reward file": ("mkdir -p /logs/verifier /tmp/.verifier/logs/verifier; echo 1 > /logs/verifier/reward.txt; "
                                "echo 1 > /tmp/.verifier/logs/verifier/reward.txt; chmod -R a-w /tmp/.verifier; true"),
}


def _task(root, dockerfile: str | None = None):
    d = root / "solve-it"
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "environment").mkdir()
    (d / "instruction.md").write_text("Write the word solved to answer.txt.\n")
    (d / "tests" / "test.sh").write_text(TEST_SH)
    (d / "tests" / "check.py").write_text("assert open('answer.txt').read().strip() == 'solved'\n")
    (d / "solution" / "solve.sh").write_text("echo solved > answer.txt\n")
    if dockerfile:
        (d / "environment" / "Dockerfile").write_text(dockerfile)
    else:
        (d / "environment" / "setup.sh").write_text("echo unsolved > answer.txt\n")
    return root


def _episode(env: TerminalEnv, actions: list[str]):
    env.reset(options={"task_id": "solve-it"})
    for a in actions:
        _, reward, term, _, info = env.step(a)
        if term:
            break
    assert term
    return reward, info["next_state"].data


def _attacks_get_nothing(env: TerminalEnv) -> None:
    for name, attack in ATTACKS.items():
        reward, data = _episode(env, [render_tool_call("bash", {"command": attack}), SUBMIT])
        assert (reward, data["reward"], data["tampered"]) == (-1.0, 0.0, []), (name, data["verifier_log"])
    reward, data = _episode(env, env.load_task("solve-it").oracle)
    assert reward == 1.0 and data["tampered"] == [] and data["changed_outside"] == [], data


@pytest.mark.docker
def test_attacks_get_no_reward_docker(tmp_path):
    env = TerminalEnv(tasks_dir=str(_task(tmp_path)), sandbox="docker", pool_size=1)
    try:
        _attacks_get_nothing(env)
    finally:
        env.close()


@pytest.mark.bwrap
def test_attacks_get_no_reward_bwrap(tmp_path):
    env = TerminalEnv(tasks_dir=str(_task(tmp_path)), sandbox="bwrap")
    try:
        _attacks_get_nothing(env)
    finally:
        env.close()


@pytest.mark.docker
def test_system_path_change_is_tampered(tmp_path):
    # A careless image leaves /usr/local/bin (first on every PATH) writable: the agent shadows grep
    # and python3 there, which the verifier's fixed PATH would find. docker diff tells.
    dockerfile = "ARG BASE\nFROM ${BASE}\nRUN chmod 1777 /usr/local/bin\nUSER agent\nWORKDIR /home/agent\n"
    env = TerminalEnv(tasks_dir=str(_task(tmp_path, dockerfile)), sandbox="docker", pool_size=1)
    try:
        reward, data = _episode(env, [render_tool_call("bash", {"command": FAKE.format(d="/usr/local/bin")}), SUBMIT])
        assert reward == -1.0 and data["reward"] == 0.0 and data["verdict"] == -1
        assert {"A /usr/local/bin/grep", "A /usr/local/bin/python3"} <= set(data["tampered"]) <= set(data["changed_outside"])
        reward, data = _episode(env, env.load_task("solve-it").oracle)
        assert reward == 1.0 and data["tampered"] == [], data
    finally:
        env.close()


@pytest.mark.bwrap
def test_bwrap_system_paths_are_read_only_and_processes_are_snapshotted(tmp_path):
    env = TerminalEnv(tasks_dir=str(_task(tmp_path)), sandbox="bwrap")
    try:
        env.reset(options={"task_id": "solve-it"})
        _, _, _, _, info = env.step(render_tool_call("bash", {"command": FAKE.format(d="/usr/local/bin")}))
        assert info["next_state"].data["exit_code"] != 0  # read-only: nothing to tamper with
        _, _, _, _, info = env.step(render_tool_call("bash", {"command": "nohup sleep 4242 >/dev/null 2>&1 & echo $!"}))
        pid = int(info["next_state"].data["stdout"])
        sb = env._sb
        _, reward, _, _, info = env.step(SUBMIT)
        assert reward == -1.0 and info["next_state"].data["tampered"] == []
        assert not sb._namespace_pids()  # the agent's processes and the tests' are gone
        assert pid > 0
    finally:
        env.close()
