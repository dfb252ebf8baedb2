"""`python -m experiments.bench fork`'s GUI case on real Chromium, its skip line without one, and
the case filter."""
from __future__ import annotations

import pytest

from experiments.bench import fork


@pytest.mark.browser
def test_gui_fork_is_timed_with_its_own_pool_and_a_shared_one():
    out = fork.main(["--cases", "gui", "--forks", "2"])
    assert set(out) == {"gui_fork_p50_ms", "gui_fork_p99_ms", "gui_fork_shared_p50_ms", "gui_fork_shared_p99_ms"}
    assert all(v > 0 for v in out.values())
    # a fork with its own pool starts a browser; one from a shared pool takes the idle one
    assert out["gui_fork_shared_p50_ms"] < out["gui_fork_p50_ms"]


def test_gui_case_without_chromium_is_one_line(monkeypatch):
    monkeypatch.setenv("MINIWOB_CHROME_BINARY", "/nonexistent/chromium")
    out = fork.main(["--cases", "gui,chat_sim", "--forks", "2"])
    assert out["gui"] == "skipped: no /nonexistent/chromium (install chromium and chromedriver)"
    assert out["chat_sim_fork_p50_ms"] > 0 and "goal_met" not in out


def test_unknown_case_is_refused():
    with pytest.raises(SystemExit, match="unknown case.s. gpu; choose from terminal, toolcall, chat_sim, gui, trunk"):
        fork.main(["--cases", "gpu"])
