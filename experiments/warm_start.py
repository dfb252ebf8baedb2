"""`warm_start=sft`: a supervised warm start before RL, in one job.

In run_dir/warm_start (a run dir of its own: metrics.jsonl, demos.json, checkpoints/latest/model):
the held-out evaluation of the starting model (the same split and evaluator RL uses), then SFT on
demonstrations with warm_start's settings (mode=sft's keys). The RL run then starts from that
checkpoint: cfg.model.path points at it, so the engine, the learner and a frozen OPD teacher all
load the warm-started weights. A resumed run (resume=true) reuses a finished warm start.

`warm_start.cache=true` keeps the checkpoint and its rows in $OPENCLAW_CACHE/warm_starts (default
.cache/), keyed by everything that decides them (`cache_key`: the settings, the split, and a
digest of the env's package and the demonstration code), and a later run with the same settings
starts from it at once; run_dir/warm_start then holds the cached rows and `cached_from`.
A model folder changed in place keeps its key: clear the cache folder then.

`warm_start.eval_before=false` skips the starting model's held-out evaluation. An env's config may
choose its own warm start for the shipped model (env=swe, toolcall, terminal and gui pick
warm_start/<env>.yaml, marked `env_default: true`); it is skipped, with a line, for another model
(model=local, model=tiny: `warm_start=sft` gives them one), where no model acts (policy=oracle /
random) and with mode=sft or mode=eval.
"""
from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import shutil
import tempfile
from pathlib import Path
from contextlib import AsyncExitStack
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf, open_dict

from agent import host_memory
from envs.base import AgentEnv, TaskSplit
from experiments.factories import (ConfigError, build_evaluator, build_policy, build_runner, build_sft, env_class, member_env,
                                   run_mode)
from learner import sft_demos
from learner.compute_thread import on_learner_thread
from learner.runlog import RunLog
from learner.sft import summary as sft_summary

log = logging.getLogger(__name__)
BEFORE = "before warm start"  # the label of the starting model's held-out figures
MODEL_POLICIES = ("local", "sglang")  # policies that sample from cfg.model (the others have no weights to warm-start)
SHIPPED_MODEL = "smollm2"  # the model an env's own warm start is for (model=smollm2)


def enabled(cfg: DictConfig) -> bool:
    """Whether this run warm-starts. An env's own warm start (`env_default: true`, e.g. env=swe's)
    is skipped, with a line saying so, where it does not apply: mode=sft or eval, a policy without a model."""
    ws = cfg.get("warm_start", {})
    name = str(ws.get("name", "none"))
    if name not in ("none", "sft"):
        raise ConfigError(f"warm_start must be none or sft, got {name!r}")
    if name == "sft" and bool(ws.get("env_default", False)):
        # it teaches the shipped model the env's format: another model (a user's, a warm-started
        # checkpoint, the test model) starts as given; mode=eval measures the model it is given
        if (str(cfg.model.name) != SHIPPED_MODEL or str(cfg.mode.name) == "sft" or not run_mode(cfg).trains
                or str(cfg.policy.name) not in MODEL_POLICIES):
            log.info("warm start: env=%s's own warm start skipped (model=%s, mode=%s, policy=%s; warm_start=sft runs one)",
                     cfg.env.name, cfg.model.name, cfg.mode.name, cfg.policy.name)
            return False
    if name == "sft" and str(cfg.mode.name) == "sft":
        raise ConfigError("warm_start=sft goes with an RL mode; mode=sft is the warm start on its own")
    return name == "sft"


async def warm_start(cfg: DictConfig, make_env: Callable[[], AgentEnv], runlog: RunLog,
                     split: TaskSplit, demonstrable: TaskSplit) -> dict[str, Any] | None:
    """Run the warm start (or find a finished one) and point cfg.model.path at its checkpoint;
    `demonstrable`: the tasks of `split` its demonstrations may come from.
    Returns the starting model's held-out figures (None when reused or when nothing is held out),
    labelled `phase: before warm start`."""
    ws = RunLog(runlog.dir / "warm_start")
    model = ws.checkpoints / "latest" / "model"
    before: dict[str, Any] | None = None
    cached = cache_dir(cfg, split) if bool(cfg.warm_start.get("cache", False)) else None
    log.info("warm start: SFT on %d oracle demonstrations of training tasks (%s), %d epochs%s", int(cfg.warm_start.n_demos),
             cfg.env.name, int(cfg.warm_start.epochs), "; cached for later runs" if cached is not None else "")
    if bool(cfg.resume) and (model / "config.json").is_file():
        log.info("warm start: reusing %s", model)
    elif cached is not None and (cached / "model" / "config.json").is_file():
        log.info("warm start: reusing the cached one with these settings, %s", cached)
        shutil.copy2(cached / "metrics.jsonl", ws.dir / "metrics.jsonl")  # the run's record names what it started from
        (ws.dir / "cached_from").write_text(f"{cached}\n")
        rows = [json.loads(line) for line in (cached / "metrics.jsonl").read_text().splitlines()]
        if rows and rows[0].get("phase") == BEFORE:  # none when the warm start did not evaluate first
            before = {k: v for k, v in rows[0].items() if k.startswith("heldout/") or k == "phase"}
        model = cached / "model"
    else:
        with host_memory.PHASES.phase("warm start"):
            before = await _run(cfg, make_env, ws, split, demonstrable)
        ws.close()
        if cached is not None:
            _store(model, ws.dir / "metrics.jsonl", cached)
            log.info("warm start: cached as %s (warm_start.cache=false: always run it)", cached)
    with open_dict(cfg):
        cfg.model.path = str(model.resolve())
    return before


def cache_key(cfg: DictConfig, split: TaskSplit) -> str:
    """What decides a warm start's checkpoint and its 'before' figures: the model, the env, the
    warm start's settings, the learner's, the held-out evaluation's, the seed, the context, and
    the task ids on each side of the split (the same settings can pose other tasks when an env's
    task set changes, e.g. synthesized instances: a cached demonstration must never be held out)."""
    parts = {k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("model", "env", "warm_start", "learner", "eval")}
    parts.update(seed=cfg.seed, max_context=cfg.max_context, sampling=OmegaConf.to_container(cfg.sampling, resolve=True),
                 split=split.to_dict(), source=source_digest(cfg))
    for k in ("cache", "env_default"):  # where it is kept, who chose it: neither changes it
        parts["warm_start"].pop(k, None)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def source_digest(cfg: DictConfig) -> str:
    """A digest of what makes the demonstrations beside the settings: each env class's package
    (the folder of its module and everything under it: oracle, tasks, task generators; a module
    outside a package alone) and the code that turns oracle episodes into samples. Editing any of
    them (e.g. how an oracle writes its commands) makes another warm start, not a stale one."""
    if str(cfg.env.name) == "mix":
        classes = [env_class(member_env(cfg, str(k), m)) for k, m in cfg.env.members.items()]
    else:
        classes = [env_class(cfg.env)]
    files: set[Path] = {Path(sft_demos.__file__).resolve()}
    for cls in classes:
        module = Path(inspect.getfile(cls)).resolve()
        if (module.parent / "__init__.py").is_file():
            files.update(f for f in module.parent.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        else:
            files.add(module)
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f"{f.name}\0".encode() + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_dir(cfg: DictConfig, split: TaskSplit) -> Path:
    from agent.policy.models import cache_base  # torch and transformers: imported only when used

    return cache_base() / "warm_starts" / f"{cfg.env.name}-{cache_key(cfg, split)}"


def _store(model: Path, metrics: Path, cached: Path) -> None:
    """Copy the checkpoint and its rows into the cache whole or not at all (a rename)."""
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cached.name}-", dir=cached.parent))
    try:
        shutil.copytree(model, tmp / "model")
        shutil.copy2(metrics, tmp / "metrics.jsonl")
        if cached.exists():  # a concurrent run stored it first: theirs stands
            return
        tmp.rename(cached)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _run(cfg: DictConfig, make_env: Callable[[], AgentEnv], ws: RunLog, split: TaskSplit,
               demonstrable: TaskSplit) -> dict[str, Any] | None:
    """The starting model's held-out figures (None when nothing is held out or
    warm_start.eval_before=false), then SFT."""
    before: dict[str, Any] | None = None
    if bool(cfg.warm_start.get("eval_before", True)):
        async with AsyncExitStack() as stack:  # the starting model's policy, stopped before SFT loads its own
            policy = build_policy(cfg, stack)
            evaluator = await asyncio.to_thread(build_evaluator, cfg, policy, make_env, split.held_out, stack)
            if evaluator is not None:
                before = {"phase": BEFORE, **await evaluator()}
        host_memory.trim()  # what the stopped engine's thread freed, before SFT allocates its own
    async with AsyncExitStack() as stack:
        sft, demos = await on_learner_thread(build_sft, cfg, make_env, ws, cfg.warm_start, (split, demonstrable))
        rows = await sft.run(build_runner(cfg, make_env, demos, stack, branch=False), before)
    del sft, demos  # the SFT learner's weights and optimizer state go before RL loads its own
    host_memory.trim()
    log.info("warm start: %s; RL starts from it", sft_summary(rows))
    return before
