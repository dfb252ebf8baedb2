"""GuiEnv on real MiniWoB pages in real headless Chromium (marked browser)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest

import envs.base  # noqa: F401  (registers openclaw/GUI-v0)
from envs.gui.browser import CHROMIUM_ARGS, BrowserPool
from envs.gui.env import GuiEnv
from envs.gui.procs import browser_pids, kill_marked, owner_prefix
from envs.gui.screen import image_content_part
from envs.gui.tasks import FAMILIES, SOLVERS
from tests.cli import REPO

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def env():
    e = GuiEnv(max_turns=8)
    yield e
    e.close()


def _run_oracle(env: GuiEnv, task: str, seed: int) -> tuple[float, list[dict]]:
    """The oracle's episode: its reward and each step's info, with the oracle's text as "action"."""
    obs, info = env.reset(seed=seed, options={"task_id": task})
    infos = []
    while True:
        action = env.oracle_action()
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs in env.observation_space
        infos.append({**info, "action": action})
        if terminated or truncated:
            return reward, infos


def test_enough_tasks_and_solvers():
    assert len(FAMILIES) >= 20 and len(set(FAMILIES)) == len(FAMILIES)
    assert len(SOLVERS) >= 8 and set(SOLVERS) <= set(FAMILIES)


# The oracle's commands are demonstrations: exactly as the system prompt writes them, nothing else.
_PROMPT_FORMAT = re.compile(r'click\(\d+\)|click_xy\(\d+, \d+\)|type\(\d+, "[^"\\]*"\)')


@pytest.mark.parametrize("family", sorted(SOLVERS))
def test_oracle_solves_family_on_several_seeds(env, family):
    for seed in (0, 1, 2):
        reward, infos = _run_oracle(env, f"{family}/{seed}", seed=0)
        assert reward == 1.0, (family, seed, [i["next_state"].content for i in infos])
        assert infos[-1]["status"] == "ok" and infos[-1]["outcome"] == 1.0
        assert infos[-1]["next_state"].data["verdict"] == 1
        for info in infos:
            assert _PROMPT_FORMAT.fullmatch(info["action"]), info["action"]


def test_observation_and_next_state_contract(env, tmp_path):
    obs, info = env.reset(seed=3, options={"task_id": "enter-text"})
    assert obs["screenshot"].shape == (210, 160, 3) and obs["screenshot"].dtype == np.uint8
    assert obs["screenshot"].std() > 0  # a real rendering, not a blank array
    target = env.screen.fields["target"]
    assert f'"{target}"' in obs["text"] and "textbox" in obs["text"] and "Submit" in obs["text"]
    assert info["messages"][-1]["content"] == obs["text"] and info["messages"][0]["role"] == "system"
    box = next(e for e in env.screen.elements if e.role == "textbox")

    obs, reward, term, trunc, info = env.step(f'I will type it. type({box.ref}, "{target}")')
    ns = info["next_state"]
    assert (ns.kind, ns.role, info["status"], reward, term) == ("screen", "user", "ok", 0.0, False)
    assert ns.content == obs["text"] and f'value="{target}"' in ns.content
    assert any(f'value="{target}"' in line for line in ns.data["changes"]["added"])
    assert ns.data["changed"] and ns.data["progress"] == ["target"] and ns.data["verdict"] == 1
    assert ns.data["fields"] == {"target": target} and ns.data["raw_reward"] is None
    assert ns.data["screenshot_shape"] == [210, 160, 3]

    env.screenshot_dir = tmp_path  # saved screenshots: their path goes into the data
    try:
        _, _, _, _, info = env.step("scroll(0, 10)")
    finally:
        env.screenshot_dir = None
    saved = Path(info["next_state"].data["screenshot"])
    assert saved.parent == tmp_path and saved.suffix == ".png" and saved.stat().st_size > 100

    submit = next(e for e in env.screen.elements if e.text == "Submit")
    call = '<tool_call>{"name": "click", "arguments": {"ref": %d}}</tool_call>' % submit.ref
    obs, reward, term, trunc, info = env.step(call)
    assert info["next_state"].role == "tool" and term and reward == 1.0
    assert info["next_state"].data["raw_reward"] == 1.0 and info["next_state"].data["done"]
    part = image_content_part(obs["screenshot"])
    assert part["image_url"]["url"].startswith("data:image/png;base64,")


def test_no_change_and_give_up_verdicts(env):
    env.reset(seed=4, options={"task_id": "click-button"})
    text_div = next(e for e in env.screen.elements if e.role == "div")
    _, _, term, _, info = env.step(f"click({text_div.ref})")
    assert not term and info["next_state"].data["changed"] is False and info["next_state"].data["verdict"] == -1
    _, reward, term, _, info = env.step("done()")
    assert term and reward == -1.0 and info["next_state"].data["verdict"] == -1


@pytest.mark.parametrize("action, needle", [
    ("fly(3)", "Unknown command 'fly'"),
    ("click(999)", "no element with id 999"),
    ("type(999, \"x\")", "no element with id 999"),
    ("click_xy(500, 20)", "off screen"),
    ("click_xy(-1, 5)", "off screen"),
    ('type(4, "open)', "Unbalanced quotes"),
    ('key("F13")', "unknown key"),
    ("just prose", "No command found"),
])
def test_bad_actions_are_invalid_and_change_nothing(env, action, needle):
    obs0, _ = env.reset(seed=5, options={"task_id": "click-button"})
    before = list(env.screen.listing())
    obs, reward, term, trunc, info = env.step(action)
    assert info["status"] == "invalid_action" and needle in obs["text"], obs["text"]
    assert obs["text"].startswith("Invalid action:") and reward == 0.0 and not term
    assert env.screen.listing() == before and np.array_equal(obs["screenshot"], obs0["screenshot"])
    assert info["next_state"].data["verdict"] == -1 and info["next_state"].data["invalid"]


def test_turn_limit_truncates(env):
    env.reset(seed=6, options={"task_id": "click-button"})
    for _ in range(env.max_turns):
        obs, reward, term, trunc, info = env.step("scroll(0, 10)")
    assert trunc and not term and reward == -1.0 and info["outcome"] == -1.0


def test_random_actions_never_crash(env):
    rng = np.random.default_rng(0)
    statuses = set()
    for i, task in enumerate(FAMILIES):
        obs, _ = env.reset(seed=i, options={"task_id": task})
        for _ in range(4):
            obs, reward, term, trunc, info = env.step(env.random_action(rng))
            assert obs in env.observation_space
            assert info["status"] in ("ok", "invalid_action")
            assert info["next_state"].data["verdict"] in (-1, 0, 1)
            statuses.add(info["status"])
            if term or trunc:
                break
    assert statuses == {"ok", "invalid_action"}


def test_browser_is_reused_across_episodes(env):
    env.reset(seed=7, options={"task_id": "click-test"})
    browser = env.backend.browser
    for task in ("enter-text", "click-tab", "click-test"):
        env.reset(options={"task_id": task})
        assert env.backend.browser is browser
    assert len(env.pool) == 1


def test_dead_browser_is_infra_error_then_replaced(env):
    env.reset(seed=8, options={"task_id": "enter-text"})
    marker = env.backend.browser.marker
    kill_marked(marker)  # the browser dies under the agent
    obs, reward, term, trunc, info = env.step("scroll(0, 10)")
    assert info["status"] == "infra_error" and trunc and not term and info["outcome"] is None
    assert obs in env.observation_space and obs["text"].startswith("The browser failed")
    assert browser_pids(marker) == set()
    reward, _ = _run_oracle(env, "enter-text", seed=9)  # the next episode gets a fresh browser
    assert reward == 1.0 and env.backend.browser.marker != marker


def test_check_env_passes():
    from gymnasium.utils.env_checker import check_env

    env = gymnasium.make("openclaw/GUI-v0")
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


def test_close_leaves_no_browser():
    env = GuiEnv()
    env.reset(seed=0, options={"task_id": "click-test"})
    marker = env.backend.browser.marker
    pids = browser_pids(marker)
    assert len(pids) >= 3  # chromedriver, chromium and its helpers
    cmdlines = [Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0") for p in pids]
    main = [c for c in cmdlines if any(a.startswith(b"--user-data-dir") for a in c) and b"--type=renderer" not in c]
    assert main, cmdlines
    for flag in CHROMIUM_ARGS:  # offline and headless, as docs/architecture.md, "Machines", says
        assert flag.encode() in main[0], flag
    env.close()
    assert browser_pids(marker) == set()
    env.close()  # closing twice is allowed


@pytest.mark.heavy
def test_eight_envs_in_parallel_leave_no_browser():
    pool = BrowserPool(max_idle=8)
    envs = [GuiEnv(pool=pool) for _ in range(8)]
    rewards: list[float] = []
    errors: list[BaseException] = []

    def run(e: GuiEnv, k: int) -> None:
        try:
            for j, task in enumerate(("click-button", "enter-text")):
                rewards.append(_run_oracle(e, task, seed=10 * k + j)[0])
        except BaseException as ex:  # surfaced below
            errors.append(ex)

    threads = [threading.Thread(target=run, args=(e, k)) for k, e in enumerate(envs)]
    markers = set()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        assert not errors, errors
        assert rewards == [1.0] * 16
        markers = {e.backend.browser.marker for e in envs}
        assert len(markers) == 8  # eight distinct browsers ran at once
    finally:
        for e in envs:
            e.close()
        pool.close()
    for m in markers:
        assert browser_pids(m) == set()


_RUNNER = textwrap.dedent("""
    import sys, time
    from envs.gui.env import GuiEnv
    env = GuiEnv()
    env.reset(seed=0, options={"task_id": "click-test"})
    print("ready", flush=True)
    time.sleep(120)
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_runner_interrupted_or_killed_leaves_no_browser(sig):
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout.readline().strip() == "ready"
        prefix = owner_prefix(proc.pid)
        assert len(browser_pids(prefix)) >= 3
        proc.send_signal(sig)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 90  # Chromium's exit took over 30 s beside the parallel suite's browsers
        while browser_pids(prefix) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert browser_pids(prefix) == set()
    finally:
        proc.kill()
        proc.wait(timeout=10)
