"""The learn-swe recipe end to end with the tiny model: synthesized instances, the oracle's
workflow as demonstrations (never of held-out instances), SFT, one outcome update, the curve.
The tiny model reads bytes: its demonstrations need max_context past 4096, and its episodes at most
6 turns to stay within its 4096 positions."""
from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from envs.base import TaskSplit
from envs.swe import bundled, synth
from experiments.warm_start import cache_key, enabled
from tests.cli import REPO, run_cli


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "experiments" / "conf"), version_base=None):
        return compose("config", overrides=list(overrides))


def test_env_swe_warm_starts_by_itself_where_a_model_acts():
    cfg = _cfg("env=swe")  # the design card's command: a cached warm start on the oracle's workflow
    assert cfg.warm_start.name == "sft" and cfg.warm_start.cache and not cfg.warm_start.eval_before and enabled(cfg)
    assert not enabled(_cfg("env=swe", "policy=oracle"))  # no model to warm-start: skipped, not an error
    assert not enabled(_cfg("env=swe", "mode=sft"))  # the warm start on its own
    assert not enabled(_cfg("env=swe", "mode=eval"))  # measures the model it is given
    assert not enabled(_cfg("env=swe", "warm_start=none"))
    assert not enabled(_cfg("env=swe", "model=tiny"))  # for the shipped model: another one starts as given
    assert not enabled(_cfg("env=swe", "model=local", "model.path=/a/warm-started/checkpoint"))
    assert enabled(_cfg("env=swe", "model=tiny", "warm_start=sft"))  # unless asked for
    toolcall = _cfg()  # the default env has its own too (the shipped model never calls its tool untaught)
    assert toolcall.env.name == "toolcall" and toolcall.warm_start.env_default and enabled(toolcall)
    for env in ("terminal", "gui"):  # so do the other general envs; a turn the sampler would cut is not taught
        own = _cfg(f"env={env}")
        assert own.warm_start.env_default and own.warm_start.cache and not own.warm_start.keep_long_turns and enabled(own)
    assert _cfg("env=reasoning").warm_start.name == "none"  # envs without one keep the plain default
    assert _cfg("+experiment=learn-terminal").warm_start.keep_long_turns  # a recipe's own warm start wins over the env's
    split = TaskSplit(["a", "b"], ["c"])
    assert cache_key(cfg, split) == cache_key(_cfg("env=swe", "warm_start.cache=false"), split)  # where it is kept is no setting
    assert cache_key(cfg, split) != cache_key(cfg, TaskSplit(["a", "c"], ["b"]))  # other tasks held out: another warm start
    learn = _cfg("+experiment=learn-swe")
    assert learn.env.instances == "synth" and learn.warm_start.cache and learn.mode.name == "outcome"


def test_a_cached_warm_start_is_keyed_by_its_envs_package_too(tmp_path, monkeypatch):
    """Demonstrations come from the env's oracle and task files: editing them (not only the
    settings) makes another warm start."""
    pkg = tmp_path / "my_envs"
    (pkg / "tasks").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "env.py").write_text("from tests.toy_envs import CountdownEnv\n\n\nclass MyEnv(CountdownEnv):\n    pass\n")
    (pkg / "tasks" / "t1.txt").write_text("count to 3")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg, split = _cfg("env=custom", "env.entry_point=my_envs.env:MyEnv"), TaskSplit(["a"], ["b"])
    key = cache_key(cfg, split)
    assert cache_key(cfg, split) == key  # stable
    (pkg / "tasks" / "t1.txt").write_text("count to 4")  # a task file under the env's package
    changed = cache_key(cfg, split)
    assert changed != key
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "env.cpython-311.pyc").write_bytes(b"compiled")  # bytecode is no source
    assert cache_key(cfg, split) == changed


@pytest.mark.slow
@pytest.mark.docker
def test_learn_swe_warm_starts_on_synthesized_bugs_then_reports_rls_own_rise(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_CACHE", str(tmp_path / "cache"))
    records = synth.synthesize(bundled.REPOS / "inikit", "inikit", "openclaw/inikit", bundled.OWNER, "learn", 0, 1,
                               log=lambda s: None)
    path = tmp_path / "synth.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:6]))
    p = run_cli("+experiment=learn-swe", "model=tiny", f"env.instances={path}", "steps=1", "warm_start.n_demos=2",
                "warm_start.epochs=1", "warm_start.cache=false", "eval.n_tasks=2", "n_envs=2", "tasks_per_step=1",
                "group_size=2", "sampling.max_new_tokens=8", "env.max_turns=6", "max_context=16384",
                f"run_dir={tmp_path}/t", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "start (after 0) " in out  # no before-point (eval_before=false): the curve starts at the warm-started policy
    demos = json.loads((tmp_path / "t" / "warm_start" / "demos.json").read_text())
    assert len(demos["train"]["task_ids"]) == 2 and not set(demos["train"]["task_ids"]) & set(demos["split"]["held_out"])
    cfg = (tmp_path / "t" / "config.yaml").read_text()
    assert "name: swe" in cfg and "name: outcome" in cfg
