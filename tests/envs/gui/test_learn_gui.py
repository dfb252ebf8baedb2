"""The learn-gui recipe end to end with the tiny model: oracle demonstrations of training pages
in real Chromium, SFT, an outcome update, and the held-out curve (marked browser and slow)."""
from __future__ import annotations

import json

import pytest

from envs.gui.tasks import parse_task_id
from tests.cli import run_cli

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_learn_gui_warm_starts_on_training_pages_then_reports_rls_own_rise(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_CACHE", str(tmp_path / "cache"))  # the recipe caches its warm start; not here
    p = run_cli("+experiment=learn-gui", "model=tiny", "steps=1", "warm_start.n_demos=4", "warm_start.epochs=1",
                "warm_start.cache=false",
                "warm_start.heldout_demos=2", "eval.n_tasks=4", "n_envs=2", "tasks_per_step=2", "group_size=2",
                "sampling.max_new_tokens=8", "env.seeds_per_family=4", f"run_dir={tmp_path}/g", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "start (after 0) " in out and "peak RSS " in out  # no before-point: the curve is RL's own rise
    demos = json.loads((tmp_path / "g" / "warm_start" / "demos.json").read_text())
    shown, held = demos["train"]["task_ids"], demos["split"]["held_out"]
    assert len(shown) == 4 and not set(shown) & set(held)  # every oracle episode succeeded; none held out
    assert {parse_task_id(t)[0] for t in held} <= {parse_task_id(t)[0] for t in demos["split"]["train"]}
    cfg = (tmp_path / "g" / "config.yaml").read_text()
    assert "name: gui" in cfg and "name: outcome" in cfg and "max_turns: 4" in cfg and "seeds_per_family: 4" in cfg
    assert "offer_tools: false" in cfg
