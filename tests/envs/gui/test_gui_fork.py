"""GuiEnv.fork() on real MiniWoB pages in real headless Chromium (marked browser): the fork
replays the episode from its seed, continues exactly as the original under the same command and
on its own under a different one, frees its browser, and refuses a page that does not replay."""
from __future__ import annotations

import pytest

from envs.base import ForkError
from envs.gui.env import GuiEnv
from envs.gui.procs import browser_pids
from tests.envs.test_env_fork import _same_then_apart

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def env():
    e = GuiEnv(max_turns=8, families=["login-user"])
    yield e
    e.close()


def test_gui_fork_replays_then_goes_its_own_way(env):
    env.reset(seed=5, options={"task_id": "login-user"})
    env.step(env.oracle_action())  # the user name typed
    login = next(e.ref for e in env.screen.elements if e.text == "Login")
    # The same password typed into both; then the original logs in, the fork clicks beside.
    mine, theirs = _same_then_apart(env, env.oracle_action(), f"click({login})", "click_xy(0, 0)")
    assert mine["outcome"] == 1.0 and theirs["outcome"] is None and theirs["status"] == "ok"
    env.reset(seed=6, options={"task_id": "login-user"})
    env.step(env.oracle_action())
    fork = env.fork()
    marker = fork.backend.browser.marker
    assert fork.backend.browser is not env.backend.browser and fork.screen.text() == env.screen.text()
    fork.close()
    assert browser_pids(marker) == set()  # the fork's own pool and browser are gone
    assert env.step(env.oracle_action())[4]["status"] == "ok"  # the original goes on


def test_gui_fork_refuses_a_page_that_replays_differently(env):
    env.reset(seed=7, options={"task_id": "login-user"})
    env.step(env.oracle_action())
    env._seed += 1  # as if the page had drawn other values: the replay cannot match
    with pytest.raises(ForkError, match="not deterministic"):
        env.fork()
