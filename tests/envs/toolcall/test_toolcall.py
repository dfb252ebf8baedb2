"""ToolCall env end to end: oracle, random actions, check_env and bad input, on real bwrap."""
from __future__ import annotations

import json
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the envs)
from envs.tool_calls import render_tool_call
from envs.toolcall import problems
from envs.toolcall.answers import extract_boxed, is_equivalent
from envs.toolcall.env import ToolCallEnv

pytestmark = pytest.mark.bwrap
STATUSES = {"ok", "invalid_action", "env_error", "infra_error", "timeout"}


@pytest.fixture(scope="module")
def env():
    e = ToolCallEnv(code_timeout=2.0)
    yield e
    e.close()


def _call(code: str) -> str:
    return render_tool_call("python", {"code": code})


def _solve_with_oracle(env: ToolCallEnv, task_id: str) -> float:
    env.reset(options={"task_id": task_id})
    reward, done = 0.0, False
    for action in env.task.oracle:
        _, reward, term, trunc, info = env.step(action)
        assert info["status"] == "ok", info["next_state"]
        done = term or trunc
    assert done
    return reward


def test_generator_is_big_varied_and_deterministic():
    tasks = problems.generate(500)
    assert len(tasks) == 500 and len({t.prompt for t in tasks}) == 500
    assert [t.task_id for t in tasks[:3]] == ["gen-00000", "gen-00001", "gen-00002"]
    assert len({t.meta["family"] for t in tasks}) >= 8
    again = problems.make_task(42)
    assert again.prompt == tasks[42].prompt and again.answer == tasks[42].answer
    assert problems.generate(20, seed=1)[5].prompt != tasks[5].prompt
    for t in tasks:
        assert t.answer == extract_boxed(t.oracle[-1])
        assert "<tool_call>" in t.oracle[0]


def test_families_pick_which_problems_are_drawn():
    """The difficulty knob: a subset of families draws from those alone, in turn, and their
    oracles still solve them; an unknown family is one clear error naming the choices."""
    env = ToolCallEnv(n_problems=20, families=["arithmetic", "averages"])
    try:
        families = [env._tasks[i].meta["family"] for i in env._ids]
        assert families == ["arithmetic", "averages"] * 10
        assert _solve_with_oracle(env, env._ids[1]) == 1.0
    finally:
        env.close()
    with pytest.raises(ValueError, match=r"unknown problem families \['calculus'\]; choose among arithmetic, "):
        ToolCallEnv(families=["arithmetic", "calculus"])
    with pytest.raises(ValueError, match="does not apply to data="):
        ToolCallEnv(data="problems.jsonl", families=["arithmetic"])


def test_oracle_solves_sampled_problems(env):
    rng = np.random.default_rng(0)
    ids = env.task_ids()
    fams = len(problems.FAMILIES)
    sample = [ids[int(i) * fams + f] for i in rng.choice(len(ids) // fams, size=3, replace=False) for f in range(fams)]
    assert len(sample) == 3 * fams
    for tid in sample:
        assert _solve_with_oracle(env, tid) == 1.0, tid


@pytest.mark.full
def test_oracle_solves_all_500(env):
    failed = [tid for tid in env.task_ids() if _solve_with_oracle(env, tid) != 1.0]
    assert not failed


def test_tool_result_next_state(env):
    env.reset(options={"task_id": "gen-00003"})
    obs, reward, term, trunc, info = env.step(_call("import math\nprint(math.factorial(20))\nprint('warn', file=__import__('sys').stderr)"))
    ns = info["next_state"]
    assert (ns.role, ns.kind, info["status"], reward, term, trunc) == ("tool", "tool_result", "ok", 0.0, False, False)
    assert ns.data["exit_code"] == 0 and ns.data["stdout"] == "2432902008176640000\n"
    assert ns.data["stderr"] == "warn\n" and "2432902008176640000" in obs and "warn" in obs
    _, _, _, _, info = env.step(_call("1/0"))
    assert info["status"] == "ok" and info["next_state"].data["exit_code"] == 1
    assert "ZeroDivisionError" in info["next_state"].data["error"]


def test_wrong_answer_and_turn_limit_give_minus_one():
    e = ToolCallEnv(max_turns=2, n_problems=20)
    try:
        e.reset(options={"task_id": "gen-00000"})
        _, r, term, _, info = e.step("The answer is \\boxed{-123456}.")
        assert term and r == -1.0 and info["outcome"] == -1.0
        assert info["next_state"].data["verdict"] == -1 and info["next_state"].data["correct"] is False
        e.reset(options={"task_id": "gen-00000"})
        e.step("thinking...")
        _, r, term, trunc, info = e.step("still thinking")
        assert trunc and not term and r == -1.0 and info["outcome"] == -1.0
    finally:
        e.close()


def test_answers_are_checked_with_math_verify():
    assert is_equivalent("\\frac{91}{4}", "22.75") and is_equivalent("22.75", "91/4")
    assert is_equivalent("1,000", "1000") and not is_equivalent("43", "42")
    assert not is_equivalent("x" * 1000, "1")
    assert extract_boxed("a \\boxed{\\frac{1}{2}} then \\boxed{3}") == "3"
    assert extract_boxed("\\boxed{unclosed") is None


def test_random_actions_never_crash(env):
    rng = np.random.default_rng(123)
    seen: set[str] = set()
    for ep in range(12):
        env.reset(seed=ep)
        for _ in range(env.max_turns):
            obs, reward, term, trunc, info = env.step(env.random_action(rng))
            assert isinstance(obs, str) and len(obs) <= env.max_obs_chars + 100
            assert info["status"] in STATUSES and info["status"] != "infra_error"
            seen.add(info["status"])
            if term or trunc:
                assert reward in (1.0, -1.0)
                break
    assert {"ok", "invalid_action"} <= seen


def test_check_env_passes_without_warnings():
    e = gymnasium.make("openclaw/ToolCall-v0").unwrapped
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(e)
        assert not [str(w.message) for w in caught]
        _, info = e.reset(seed=0)
        assert info["tools"][0]["function"]["name"] == "python"
        assert info["messages"][0]["role"] == "system" and "\\boxed" in info["messages"][0]["content"]
    finally:
        e.close()


# ---- bad input ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "action, needle",
    [
        ('<tool_call>{"name": "python", "arguments": {"code": "print(1)"</tool_call>', "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "JSON object"),
        (render_tool_call("bash", {"command": "ls"}), "unknown tool"),
        (render_tool_call("python", {"source": "print(1)"}), '"code"'),
        (render_tool_call("python", {"code": 5}), '"code"'),
        ("<tool_call>", "never closed"),
        ("just chatting, no answer", "no tool call"),
    ],
)
def test_malformed_actions_are_invalid_with_a_clear_message(env, action, needle):
    env.reset(options={"task_id": "gen-00001"})
    obs, reward, term, trunc, info = env.step(action)
    assert info["status"] == "invalid_action" and not term and reward == 0.0
    assert needle in obs and obs.startswith("Error:")


def test_ten_megabyte_print_is_capped(env):
    env.reset(options={"task_id": "gen-00002"})
    obs, _, _, _, info = env.step(_call("print('x' * 10_000_000)"))
    assert info["status"] == "env_error"
    assert len(obs) <= env.max_obs_chars + 100 and "output limit" in obs
    assert info["next_state"].data["truncated"] and len(info["next_state"].data["stdout"]) < 20_000


def test_the_time_limit_is_cpu_time_with_a_wall_backstop():
    """Code may take longer than its limit in wall time (as on a loaded machine) while it does
    not compute; waiting past WALL_FACTOR x the limit stops it."""
    env = ToolCallEnv(code_timeout=1.0)
    try:
        env.reset(options={"task_id": "gen-00002"})
        _, _, _, _, info = env.step(_call("import time; time.sleep(2.5); print('woke')"))
        assert info["status"] == "ok" and info["next_state"].data["stdout"] == "woke\n"
        obs, _, _, _, info = env.step(_call("import time; time.sleep(60)"))
        assert info["status"] == "env_error" and info["next_state"].data["timed_out"] and "without finishing" in obs
        obs, _, _, _, info = env.step(_call("while True: pass"))
        assert info["status"] == "env_error" and info["next_state"].data["timed_out"] and "1 s of CPU time" in obs
    finally:
        env.close()


def test_infinite_loop_times_out(env):
    env.reset(options={"task_id": "gen-00002"})
    obs, _, _, _, info = env.step(_call("while True: pass"))
    assert info["status"] == "env_error" and info["next_state"].data["timed_out"]
    assert "timeout" in obs
    _, _, _, _, info = env.step(_call("print(6 * 7)"))  # the tool works again at once
    assert info["status"] == "ok" and info["next_state"].data["stdout"] == "42\n"


@pytest.mark.parametrize("module", ["socket", "subprocess", "ctypes", "multiprocessing", "urllib.request"])
def test_forbidden_imports_are_blocked_in_the_sandbox(env, module):
    env.reset(options={"task_id": "gen-00002"})
    obs, _, _, _, info = env.step(_call(f"import {module}\nprint('imported')"))
    assert info["status"] == "env_error" and info["next_state"].data["forbidden_import"]
    assert "not allowed" in obs and "imported" not in obs


def test_processes_cannot_be_started_from_code(env):
    env.reset(options={"task_id": "gen-00002"})
    obs, _, _, _, info = env.step(_call("import os\nos.system('echo pwned')"))
    assert "pwned" not in info["next_state"].data["stdout"] and "not allowed" in obs


def test_non_utf8_byte_soup_is_handled(env):
    rng = np.random.default_rng(7)
    soup = bytes(rng.integers(0, 256, size=4000, dtype=np.uint8)).decode("utf-8", "surrogateescape")
    env.reset(options={"task_id": "gen-00004"})
    for action in (soup, "<tool_call>" + soup + "</tool_call>", _call("print('" + "\udcff\ud800" + "')"), soup + "\\boxed{" + soup[:20] + "}"):
        obs, _, term, _, info = env.step(action)
        assert isinstance(obs, str) and info["status"] in STATUSES and info["status"] != "infra_error"
        json.dumps(info["next_state"].to_dict())  # serialisable for turns.jsonl
        if term:
            break


def test_sandbox_failure_is_infra_error_and_the_sandbox_is_replaced():
    e = ToolCallEnv(n_problems=10)
    try:
        e.reset(options={"task_id": "gen-00000"})
        assert e.step(_call("print(1)"))[4]["status"] == "ok"
        e.tool._sandbox._holder.kill()  # the sandbox dies under the episode
        e.tool._sandbox._holder.wait(5)
        _, reward, _, trunc, info = e.step(_call("print(2)"))
        assert info["status"] == "infra_error" and trunc and info["outcome"] is None and reward == 0.0
        assert _solve_with_oracle(e, "gen-00001") == 1.0  # a fresh sandbox serves the next episode
    finally:
        e.close()


def test_files_do_not_leak_between_episodes(env):
    env.reset(options={"task_id": "gen-00000"})
    env.step(_call("open('left.txt', 'w').write('secret')"))
    env.reset(options={"task_id": "gen-00001"})
    _, _, _, _, info = env.step(_call("import os\nprint(os.path.exists('left.txt'))"))
    assert info["next_state"].data["stdout"] == "False\n"


def test_env_close_frees_the_sandbox():
    e = ToolCallEnv(n_problems=10)
    e.reset(options={"task_id": "gen-00000"})
    e.step(_call("print(1)"))
    box = e.tool._sandbox
    e.close()
    assert not box.is_alive()


@pytest.mark.docker
def test_python_tool_on_docker_backend():
    pytest.importorskip("docker")
    e = ToolCallEnv(sandbox="docker", n_problems=10)
    try:
        assert _solve_with_oracle(e, "gen-00004") == 1.0
        e.reset(options={"task_id": "gen-00005"})
        obs, _, _, _, info = e.step(_call("import socket"))
        assert info["status"] == "env_error" and "not allowed" in obs
    finally:
        e.close()


def test_answer_check_in_a_worker_thread_is_quiet(caplog):
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(is_equivalent, "7/2", "3.5").result()
    assert not [r for r in caplog.records if "Timeout" in r.getMessage()]
