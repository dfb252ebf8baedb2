"""`AgentEnv.fork()`: a fork mid-episode continues exactly as its original under the same actions
and independently under different ones, for the default deep copy, toolcall, chat_sim and the
terminal env (bwrap), and an env that cannot fork says so."""
from __future__ import annotations

import threading

import pytest

from envs.base import AgentEnv, ForkError
from envs.chat_sim.env import ChatSimEnv
from envs.tool_calls import render_tool_call
from tests.toy_envs import CountdownEnv


def _timeless(info: dict) -> dict:
    """A step's next state without its wall-clock timing (the one field two runs differ in)."""
    ns = info["next_state"]
    return {"content": ns.content, "role": ns.role, "data": {k: v for k, v in ns.data.items() if k != "duration_s"}}


def _same_then_apart(env: AgentEnv, same: str, a: str, b: str) -> tuple[dict, dict]:
    """Fork `env`, step both with `same` (their next states must be equal), then the original
    with `a` and the fork with `b`; returns the two last infos. Closes the fork."""
    fork = env.fork()
    try:
        assert fork is not env and fork.turn == env.turn and fork.task.task_id == env.task.task_id
        one, two = env.step(same), fork.step(same)
        assert one[1:4] == two[1:4] and _timeless(one[4]) == _timeless(two[4]), (one, two)
        return env.step(a)[4], fork.step(b)[4]
    finally:
        fork.close()


def test_default_fork_is_a_deep_copy_that_runs_on_alone():
    env = CountdownEnv()
    env.reset(options={"task_id": "n4"})
    env.step("4")
    mine, theirs = _same_then_apart(env, "3", "2", "9")
    assert (mine["status"], mine["outcome"]) == ("ok", None) and env.expect == 1
    assert theirs["outcome"] == -1.0  # the fork said the wrong number; the original goes on
    assert env.step("1")[4]["outcome"] == 1.0


class _HoldsALock(CountdownEnv):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


def test_an_env_whose_state_cannot_be_copied_raises_fork_error():
    env = _HoldsALock()
    env.reset(options={"task_id": "n2"})
    with pytest.raises(ForkError, match="_HoldsALock cannot fork.*fork_held.*override fork"):
        env.fork()


def test_chat_sim_fork_carries_the_conversation_the_user_reads():
    seen: list[list[dict]] = []

    def complete(messages: list[dict]) -> str:  # an LLM user: what it reads is the user's state
        seen.append(messages)
        return f"Please try again ({len(messages)} messages so far).\nVERDICT: unsatisfied"

    env = ChatSimEnv(user="llm", complete=complete)
    env.reset(options={"task_id": env.task_ids()[0]})
    env.step("Here is a first answer.")
    fork = env.fork()
    try:
        assert fork.users is env.users and fork.history == env.history and fork.history is not env.history
        same = "A second answer."
        one, two = env.step(same), fork.step(same)
        assert one[4]["next_state"] == two[4]["next_state"] and seen[-1] == seen[-2]
        env.step("The original's third.")
        fork.step("The fork's own third.")
        assert env.history[-2]["content"] == "The original's third." and fork.history[-2]["content"] == "The fork's own third."
        assert env.history[:-2] == fork.history[:-2]
    finally:
        fork.close()


@pytest.mark.bwrap
def test_toolcall_fork_carries_the_files_code_wrote():
    from envs.toolcall.env import ToolCallEnv

    env = ToolCallEnv(code_timeout=5.0)
    try:
        env.reset(options={"task_id": "gen-00000"})
        clean = env.fork()  # nothing ran yet: the fork opens its own sandbox when it needs one
        assert clean.tool._sandbox is None
        clean.close()
        env.step(render_tool_call("python", {"code": "open('n.txt', 'w').write('41')"}))
        read = render_tool_call("python", {"code": "print(open('n.txt').read())"})
        mine, theirs = _same_then_apart(
            env, read, read, render_tool_call("python", {"code": "open('n.txt', 'w').write('7'); print(open('n.txt').read())"}))
        assert mine["next_state"].data["stdout"] == "41\n" and theirs["next_state"].data["stdout"] == "7\n"
    finally:
        env.close()


@pytest.mark.bwrap
def test_terminal_fork_carries_files_cwd_and_exports():
    from envs.terminal.env import TerminalEnv

    env = TerminalEnv(sandbox="bwrap")
    try:
        env.reset(options={"task_id": "json-deep-merge"})
        env.step(render_tool_call("bash", {"command": "mkdir -p sub && cd sub && export V=7 && echo a > f"}))
        probe = render_tool_call("bash", {"command": 'cat f; echo "$V"; ls -a ..'})
        mine, theirs = _same_then_apart(env, probe, render_tool_call("bash", {"command": "cat f"}),
                                        render_tool_call("bash", {"command": "echo b > f; cat f; cd /tmp"}))
        assert mine["next_state"].data["stdout"] == "a\n"
        assert theirs["next_state"].data["stdout"] == "b\n" and theirs["next_state"].data["cwd"] == "/tmp"
        assert env._sb.exec("pwd").stdout.endswith("/sub\n")
    finally:
        env.close()
