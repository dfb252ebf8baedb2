"""Wiring of a training run: judge + teacher -> scorer, learner, weight sync, checkpoints.

`Training` is the loop's `Trainer` (learner/loop.py): turns are scored the moment their next state
exists (the loop hands the runner `on_turn`, which starts a task; generation never waits on a
judge), and `train` waits for the scores of its own turns (scored copies; the runner's records
are never changed). After each step's update the learner's weights are written to
run_dir/weights/vN and the serving engine loads them (`/update_weights_from_disk`) while it
keeps serving; version N is what every later turn records. A checkpoint (weights, optimizer,
step, version) is written after the step's metrics, so `resume=true` continues exactly; records
a killed run wrote past its checkpoint are cut on resume (RunLog.rewind).

Where the engine lives in this process (policy=local) and the learner trains in it too (the torch
learner), no folder is written: if the engine serves the learner's dtype (float32 where the CPU
has no bf16 units), it serves the learner's own tensors, held once, and each optimizer step runs
on the engine's worker between batches as the update; otherwise the engine copies the learner's
weights into its own between batches.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

import numpy as np

from agent import host_memory
from learner.compute_thread import on_learner_thread
from agent.policy.base import PolicyClient
from agent.turn import Turn
from learner.advantages import build_samples
from learner.loop import Evaluator, LoopConfig, RolloutSource, StepOutput, run_loop
from learner.modes import step_reward
from learner.protocol import Learner
from learner.runlog import RunLog
from learner.samples import Sample
from learner.scorer import NextStateScorer
from learner.vine import judge_audit


log = logging.getLogger(__name__)


def with_advantages(turns: list[Turn], samples: list[Sample]) -> list[Turn]:
    """The turns with their advantage summary in meta["advantage"] (turns.jsonl, W&B table, the
    viewer); a turn that made no sample comes back as it was."""
    by_key = {(s.meta["episode_id"], s.meta["step_index"]): s for s in samples}
    out = []
    for t in turns:
        s = by_key.get((t.episode_id, t.step_index))
        if s is not None and s.advantages:
            summary = {"mean": float(np.mean(s.advantages)), "min": float(min(s.advantages)),
                       "max": float(max(s.advantages)), "masked": s.loss_mask.count(0) == len(s.loss_mask)}
            t = dataclasses.replace(t, meta={**t.meta, "advantage": summary})
        out.append(t)
    return out


class InProcessEngine(Protocol):
    """An engine in this process that takes weights as tensors (agent/policy/engine.py)."""

    async def load_weights(self, state: Mapping[str, Any], weight_version: int | None = None) -> int: ...

    def can_share(self, state: Mapping[str, Any]) -> bool: ...

    async def share_weights(self, state: Mapping[str, Any], weight_version: int | None = None) -> int: ...

    def change_weights(self, apply: Callable[[], None], weight_version: int | None = None) -> concurrent.futures.Future: ...


@runtime_checkable
class LiveWeights(Protocol):
    """A learner in this process whose weights an engine can copy or serve directly (learner/torch_learner.py)."""

    def live_weights(self) -> Mapping[str, Any]: ...


class Training:
    """One training run: `learner` trains (the torch or megatron learner), `client` serves the policy;
    `engine`, when the serving engine lives in this process, takes the learner's weights as tensors."""

    def __init__(self, mode: str, client: PolicyClient, runner: RolloutSource, runlog: RunLog,
                 scorer: NextStateScorer | None, learner: Learner, *, w_opd: float = 1.0,
                 w_rl: float = 1.0, prm_coef: float = 1.0, checkpoint_every: int = 1, resume: bool = False,
                 evaluator: Evaluator | None = None, engine: InProcessEngine | None = None) -> None:
        self.evaluator = evaluator
        self.engine = engine if isinstance(learner, LiveWeights) else None
        self.shared = False  # the engine serves the learner's own tensors (see run)
        self.mode = mode
        self.client = client
        self.weights = {"w_opd": w_opd, "w_rl": w_rl, "prm_coef": prm_coef}
        self.checkpoint_every = checkpoint_every
        self.resume = resume
        self.runner = runner
        self.runlog = runlog
        self.scorer = scorer
        self.learner = learner
        self._scoring: dict[int, asyncio.Task[Turn]] = {}  # id(turn) -> its scoring, until train takes it
        self.version = 0

    # ---- scoring, concurrent with rollouts ----------------------------------------------
    def on_turn(self, turn: Turn) -> asyncio.Task[Turn] | None:
        """Start scoring `turn`; the task (its scored copy) is what rollout.branch.at=disagree
        waits on for the turn's votes."""
        if self.scorer is None:
            return None
        task = self._scoring[id(turn)] = asyncio.create_task(self.scorer.score(turn))
        return task

    async def _scored(self, turns: list[Turn]) -> list[Turn]:
        """The scored copies of `turns`, waiting for scoring still under way. A turn whose scoring
        failed stays unscored (the scorer records judge and teacher errors itself; this is the
        unforeseen rest): one turn never stops the run."""
        out = []
        for t in turns:
            task = self._scoring.pop(id(t), None)
            try:
                scored = t if task is None else await task
            except Exception as e:
                log.warning("turn %s/%d left unscored: %s: %s", t.episode_id, t.step_index, type(e).__name__, e)
                scored = t
            # the signals onto the turn as it is now: scoring began before its episode ended and
            # the runner filled in the outcome
            out.append(dataclasses.replace(t, prm=scored.prm, opd=scored.opd))
        return out

    # ---- one update --------------------------------------------------------------------
    async def train(self, step: int, turns: list[Turn]) -> StepOutput:
        t0 = time.monotonic()
        turns = await self._scored(turns)
        score_wait = time.monotonic() - t0
        samples, stats = build_samples(turns, self.mode, **self.weights)
        turns = with_advantages(turns, samples)
        metrics: dict[str, Any] = {"reward_mean": self._reward_mean(turns, stats)}
        metrics.update({k: stats[k] for k in ("prm_score_mean", "opd_accept_rate")})
        metrics["samples"] = {k: stats[k] for k in ("samples", "samples_training", "samples_masked", "dropped",
                                                    "dropped_by_reason", "infra_excluded", "infra_rate", "timeout_rate",
                                                    "advantage_mean", "advantage_abs_mean", "loss_tokens")}
        metrics["signal"] = stats["signal"]
        if any(t.branch_id for t in turns):  # episode trees (rollout.branch): does the judge track what followed?
            metrics["judge_audit"] = judge_audit(turns)
        if not any(s.trains for s in samples):
            metrics["train"] = {"skipped": 1.0}
            return StepOutput(metrics, self.version, turns, score_wait)
        for s in samples:  # 0: sampled by the weights trained now, so their mismatch is precision alone
            s.meta["versions_behind"] = self.version - s.meta["policy_version"]
        if self.shared:
            metrics["train"], self.version = await self._train_shared(samples, self.version + 1)
        else:
            metrics["train"] = await on_learner_thread(self.learner.train_step, samples)
            await self._push_weights(self.version + 1)
        host_memory.trim()  # the step's freed activations and weight copies (agent/host_memory.py)
        return StepOutput(metrics, self.version, turns, score_wait)

    def _reward_mean(self, turns: list[Turn], stats: dict[str, Any]) -> float | None:
        """The mean scalar reward the mode trains on, before any normalisation."""
        ok = [t for t in turns if not t.status.is_infra]
        if self.mode in ("outcome", "vine"):
            vals = [t.outcome for t in ok if t.outcome is not None]
        elif self.mode == "integrated":
            coef = self.weights["prm_coef"]
            vals = [step_reward(t.outcome, t.prm.votes, coef) for t in ok if t.outcome is not None and t.prm is not None]
        elif self.mode == "opd":
            return stats["advantage_mean"]
        else:
            return stats["prm_score_mean"]
        return float(np.mean(vals)) if vals else None

    async def _train_shared(self, samples: list[Sample], version: int) -> tuple[dict[str, float], int]:
        """A train step on the weights the engine serves: gradients beside the serving, the
        optimizer step on the engine's worker between batches (so no sequence sees half-stepped
        weights), served as `version` from then on. Returns the step's figures and the version."""
        stepped: list[int] = []

        def apply(step: Callable[[], None]) -> None:  # on the learner thread
            # resolves when the step has run, or fails when the engine closes: no wait outlives it
            stepped.append(self.engine.change_weights(step, version).result())

        out = await on_learner_thread(self.learner.train_step, samples, apply)
        return out, (stepped[0] if stepped else self.version)

    async def _push_weights(self, version: int) -> None:
        if self.engine is not None:  # the learner is idle until this returns: its tensors stay still while copied
            await self.engine.load_weights(self.learner.live_weights(), version)
            self.version = version
            return
        path = self.runlog.dir / "weights" / f"v{version}"
        await on_learner_thread(self.learner.save_weights, path)
        await self.client.update_weights(str(path), version)
        self.version = version
        for old in path.parent.glob("v*"):  # the engine holds the weights in memory now
            if old != path:
                shutil.rmtree(old, ignore_errors=True)

    async def after_step(self, step: int, last: bool) -> None:
        every = self.checkpoint_every
        if every > 0 and ((step + 1) % every == 0 or last):
            await on_learner_thread(self.learner.save_checkpoint, self.runlog.checkpoints / "latest", step + 1, self.version)

    # ---- the run -----------------------------------------------------------------------
    async def run(self, loop_cfg: LoopConfig) -> list[dict[str, Any]]:
        start, version = 0, self.version
        latest = self.runlog.checkpoints / "latest"
        resumed = self.resume and (latest / "learner.json").is_file()
        if resumed:
            info = await on_learner_thread(self.learner.load_checkpoint, latest)
            start, version = info["step"], info["policy_version"]
        live = self.learner.live_weights() if self.engine is not None else None
        if live is not None and self.engine.can_share(live):  # the engine's own copy is freed; updates are steps in place
            await self.engine.share_weights(live, version)
            self.version, self.shared = version, True
        elif resumed:  # the checkpoint's weights to the engine, once
            await self._push_weights(version)
        if self.resume:  # what a killed run logged after its checkpoint is done again: once
            self.runlog.rewind(start)
        try:
            return await run_loop(self.runner, loop_cfg, self.runlog, trainer=self, evaluator=self.evaluator,
                                  start_step=start, policy_version=self.version)
        finally:
            for task in self._scoring.values():
                task.cancel()
            self._scoring.clear()
