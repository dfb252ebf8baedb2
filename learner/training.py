"""Wiring of a training run: judge + teacher -> scorer, learner, weight sync, checkpoints.

`Training` is the loop's `Trainer` (learner/loop.py): turns are scored the moment their next state
exists (the loop hands the runner `on_turn`, which starts a task; generation never waits on a
judge). After each step's update the learner's weights are written to
run_dir/weights/vN and the serving engine loads them (`/update_weights_from_disk`) while it
keeps serving; version N is what every later turn records. A checkpoint (weights, optimizer,
step, version) is written after the step's metrics, so `resume=true` continues exactly; records
a killed run wrote past its checkpoint are cut on resume (RunLog.rewind).
"""
from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from agent import host_memory
from agent.policy.base import PolicyClient
from agent.turn import Turn
from learner.advantages import build_samples
from learner.loop import Evaluator, LoopConfig, RolloutSource, StepOutput, run_loop
from learner.modes import step_reward
from learner.protocol import Learner
from learner.runlog import RunLog
from learner.samples import Sample
from learner.scorer import NextStateScorer


def note_advantages(turns: list[Turn], samples: list[Sample]) -> None:
    """Record each turn's advantage summary in turn.meta["advantage"] (turns.jsonl, W&B table);
    a turn that made no sample has none."""
    by_key = {(s.meta["episode_id"], s.meta["step_index"]): s for s in samples}
    for t in turns:
        s = by_key.get((t.episode_id, t.step_index))
        if s is not None and s.advantages:
            t.meta["advantage"] = {"mean": float(np.mean(s.advantages)), "min": float(min(s.advantages)),
                                   "max": float(max(s.advantages)), "masked": s.loss_mask.count(0) == len(s.loss_mask)}


class Training:
    """One training run: `learner` trains (the torch or megatron learner), `client` serves the policy."""

    def __init__(self, mode: str, client: PolicyClient, runner: RolloutSource, runlog: RunLog,
                 scorer: NextStateScorer | None, learner: Learner, *, w_opd: float = 1.0,
                 w_rl: float = 1.0, prm_coef: float = 1.0, checkpoint_every: int = 1, resume: bool = False,
                 evaluator: Evaluator | None = None) -> None:
        self.evaluator = evaluator
        self.mode = mode
        self.client = client
        self.weights = {"w_opd": w_opd, "w_rl": w_rl, "prm_coef": prm_coef}
        self.checkpoint_every = checkpoint_every
        self.resume = resume
        self.runner = runner
        self.runlog = runlog
        self.scorer = scorer
        self.learner = learner
        self._pending: set[asyncio.Task] = set()
        self.version = 0

    # ---- scoring, concurrent with rollouts ----------------------------------------------
    def on_turn(self, turn: Turn) -> None:
        if self.scorer is None:
            return
        task = asyncio.create_task(self.scorer.score(turn))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def pending_scores(self) -> None:
        """Wait for the scoring of every turn handed over so far (scoring errors are the
        scorer's to record; one never stops the run)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    # ---- one update --------------------------------------------------------------------
    async def train(self, step: int, turns: list[Turn]) -> StepOutput:
        samples, stats = build_samples(turns, self.mode, **self.weights)
        note_advantages(turns, samples)
        metrics: dict[str, Any] = {"reward_mean": self._reward_mean(turns, stats)}
        metrics.update({k: stats[k] for k in ("prm_score_mean", "opd_accept_rate")})
        metrics["samples"] = {k: stats[k] for k in ("samples", "samples_training", "samples_masked", "dropped",
                                                    "dropped_by_reason", "infra_excluded", "infra_rate", "timeout_rate",
                                                    "advantage_mean", "advantage_abs_mean", "loss_tokens")}
        metrics["signal"] = stats["signal"]
        if not any(s.trains for s in samples):
            metrics["train"] = {"skipped": 1.0}
            return StepOutput(metrics, self.version)
        metrics["train"] = await asyncio.to_thread(self.learner.train_step, samples)
        await self._push_weights(self.version + 1)
        host_memory.trim()  # the step's freed activations and weight copies (agent/host_memory.py)
        return StepOutput(metrics, self.version)

    def _reward_mean(self, turns: list[Turn], stats: dict[str, Any]) -> float | None:
        """The mean scalar reward the mode trains on, before any normalisation."""
        ok = [t for t in turns if not t.status.is_infra]
        if self.mode == "outcome":
            vals = [t.outcome for t in ok if t.outcome is not None]
        elif self.mode == "integrated":
            coef = self.weights["prm_coef"]
            vals = [step_reward(t.outcome, t.prm.votes, coef) for t in ok if t.outcome is not None and t.prm is not None]
        elif self.mode == "opd":
            return stats["advantage_mean"]
        else:
            return stats["prm_score_mean"]
        return float(np.mean(vals)) if vals else None

    async def _push_weights(self, version: int) -> None:
        path = self.runlog.dir / "weights" / f"v{version}"
        await asyncio.to_thread(self.learner.save_weights, path)
        await self.client.update_weights(str(path), version)
        self.version = version
        for old in path.parent.glob("v*"):  # the engine holds the weights in memory now
            if old != path:
                shutil.rmtree(old, ignore_errors=True)

    async def after_step(self, step: int, last: bool) -> None:
        every = self.checkpoint_every
        if every > 0 and ((step + 1) % every == 0 or last):
            await asyncio.to_thread(self.learner.save_checkpoint, self.runlog.checkpoints / "latest", step + 1, self.version)

    # ---- the run -----------------------------------------------------------------------
    async def run(self, loop_cfg: LoopConfig) -> list[dict[str, Any]]:
        start = 0
        latest = self.runlog.checkpoints / "latest"
        if self.resume and (latest / "learner.json").is_file():
            info = await asyncio.to_thread(self.learner.load_checkpoint, latest)
            start = info["step"]
            await self._push_weights(info["policy_version"])
        if self.resume:  # what a killed run logged after its checkpoint is done again: once
            self.runlog.rewind(start)
        try:
            return await run_loop(self.runner, loop_cfg, self.runlog, trainer=self, evaluator=self.evaluator,
                                  start_step=start, policy_version=self.version)
        finally:
            for t in list(self._pending):
                t.cancel()
