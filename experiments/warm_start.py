"""`warm_start=sft`: a supervised warm start before RL, in one job.

In run_dir/warm_start (a run dir of its own: metrics.jsonl, demos.json, checkpoints/latest/model):
the held-out evaluation of the starting model (the same split and evaluator RL uses), then SFT on
demonstrations with warm_start's settings (mode=sft's keys). The RL run then starts from that
checkpoint: cfg.model.path points at it, so the engine, the learner and a frozen OPD teacher all
load the warm-started weights. A resumed run (resume=true) reuses a finished warm start.
"""
from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import Any, Callable

from omegaconf import DictConfig, open_dict

from agent import host_memory
from envs.base import AgentEnv, TaskSplit
from experiments.factories import ConfigError, build_evaluator, build_policy, build_runner, build_sft
from learner.compute_thread import on_learner_thread
from learner.runlog import RunLog
from learner.sft import summary as sft_summary

log = logging.getLogger(__name__)
BEFORE = "before warm start"  # the label of the starting model's held-out figures


def enabled(cfg: DictConfig) -> bool:
    name = str(cfg.get("warm_start", {}).get("name", "none"))
    if name not in ("none", "sft"):
        raise ConfigError(f"warm_start must be none or sft, got {name!r}")
    if name == "sft" and str(cfg.mode.name) == "sft":
        raise ConfigError("warm_start=sft goes with an RL mode; mode=sft is the warm start on its own")
    return name == "sft"


async def warm_start(cfg: DictConfig, make_env: Callable[[], AgentEnv], runlog: RunLog,
                     split: TaskSplit) -> dict[str, Any] | None:
    """Run the warm start (or find a finished one) and point cfg.model.path at its checkpoint.
    Returns the starting model's held-out figures (None when reused or when nothing is held out),
    labelled `phase: before warm start`."""
    ws = RunLog(runlog.dir / "warm_start")
    model = ws.checkpoints / "latest" / "model"
    before: dict[str, Any] | None = None
    if bool(cfg.resume) and (model / "config.json").is_file():
        log.info("warm start: reusing %s", model)
    else:
        with host_memory.PHASES.phase("warm start"):
            before = await _run(cfg, make_env, ws, split)
        ws.close()
    with open_dict(cfg):
        cfg.model.path = str(model.resolve())
    return before


async def _run(cfg: DictConfig, make_env: Callable[[], AgentEnv], ws: RunLog, split: TaskSplit) -> dict[str, Any] | None:
    """The starting model's held-out figures (None when nothing is held out), then SFT."""
    before: dict[str, Any] | None = None
    async with AsyncExitStack() as stack:  # the starting model's policy, stopped before SFT loads its own
        policy = build_policy(cfg, stack)
        evaluator = await asyncio.to_thread(build_evaluator, cfg, policy, make_env, split.held_out, stack)
        if evaluator is not None:
            before = {"phase": BEFORE, **await evaluator()}
    host_memory.trim()  # what the stopped engine's thread freed, before SFT allocates its own
    async with AsyncExitStack() as stack:
        sft, demos = await on_learner_thread(build_sft, cfg, make_env, ws, cfg.warm_start, split)
        rows = await sft.run(build_runner(cfg, make_env, demos, stack, branch=False), before)
    del sft, demos  # the SFT learner's weights and optimizer state go before RL loads its own
    host_memory.trim()
    log.info("warm start: %s; RL starts from it", sft_summary(rows))
    return before
