"""`mode=sft`: a supervised warm start on demonstrations, ending in a checkpoint to start RL from.

Demonstrations come from the env's oracle on training tasks (episodes with outcome > 0) or from
a JSONL file of transcripts (learner/sft_demos.py). Held-out tasks (`env.task_split(eval.n_tasks,
eval.seed)`) never feed training: their oracle demonstrations only measure the held-out NLL,
before training and after every epoch. The final weights go to checkpoints/latest/model, a
folder any later run takes as `model=local model.path=...`.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from agent.actors import OracleActor
from agent.chat import ChatRenderer
from agent.rollout import EpisodeJob, Runner
from envs.base import TaskSplit
from learner.compute_thread import on_learner_thread
from learner.runlog import RunLog
from learner.samples import Sample
from learner.sft_demos import DemoActor, DemoError, Transcript, oracle_demos, pick_tasks, replay

log = logging.getLogger(__name__)


@dataclasses.dataclass
class SFTConfig:
    n_demos: int  # oracle episodes to run (JSONL: the transcripts read)
    epochs: int
    batch_size: int  # demonstrations per optimizer step
    heldout_demos: int
    seed: int
    max_context: int  # longer demonstrations are left out (a rollout could not have held them)
    max_new_tokens: int | None = None  # the sampler's limit per turn: a longer demonstrated turn is one it would cut off
    keep_long_turns: bool = True  # False: demonstrations with such a turn are left out


def longest_turn(sample: Sample) -> int:
    """The longest run of loss tokens: the longest assistant turn, with the token that ends it."""
    longest = run = 0
    for m in sample.loss_mask:
        run = run + 1 if m else 0
        longest = max(longest, run)
    return longest


def mean_nll(learner: Any, samples: list[Sample]) -> float | None:
    """Token-mean NLL per sample, then mean over samples (the SFT loss's reduction)."""
    if not samples:
        return None
    return float(np.mean([-np.mean(lp) for lp in learner.logprobs(samples)]))


class SFT:
    """One SFT run. `learner` has sft_step / logprobs / save_checkpoint (the torch learner)."""

    def __init__(self, learner: Any, renderer: ChatRenderer, runlog: RunLog, split: TaskSplit, cfg: SFTConfig,
                 transcripts: list[Transcript] | None = None, demonstrable: TaskSplit | None = None) -> None:
        self.learner = learner
        self.renderer = renderer
        self.runlog = runlog
        self.split = split
        self.demonstrable = split if demonstrable is None else demonstrable  # the tasks the oracle can act out
        self.cfg = cfg
        self.transcripts = transcripts

    def make_actor(self, job: EpisodeJob) -> DemoActor:
        return DemoActor(self.renderer, OracleActor())

    async def demonstrations(self, runner: Runner) -> tuple[list[Sample], list[Sample]]:
        """(training demos, held-out demos); what was used is written to run_dir/demos.json."""
        c = self.cfg
        record: dict[str, Any] = {"split": self.split.to_dict()}
        if self.transcripts is None:
            tasks = pick_tasks(self.demonstrable.train, c.n_demos, c.seed)
            train, record["train"] = await oracle_demos(runner, tasks, "demo", c.seed)
        else:
            train = [await replay(self.renderer, t) for t in self.transcripts]
            record["train"] = {"lines": [t.line for t in self.transcripts],
                               "task_ids": [t.task_id for t in self.transcripts if t.task_id is not None]}
        held = pick_tasks(self.demonstrable.held_out, min(c.heldout_demos, len(self.demonstrable.held_out)), c.seed + 1)
        held_out, record["held_out"] = await oracle_demos(runner, held, "heldout", c.seed + 1)
        train = self._fits(train, record["train"])
        held_out = self._fits(held_out, record["held_out"])
        (self.runlog.dir / "demos.json").write_text(json.dumps(record, indent=1))
        if not train:
            raise DemoError(f"no demonstration to train on (see {self.runlog.dir / 'demos.json'})")
        return train, held_out

    def _fits(self, samples: list[Sample], record: dict[str, Any]) -> list[Sample]:
        """The demonstrations that fit the context, less those with a turn the sampler would cut
        off unless keep_long_turns (a model taught such turns writes calls that never parse);
        both are counted in `record`."""
        c = self.cfg
        fits = [s for s in samples if s.n_tokens <= c.max_context]
        long_turn = [c.max_new_tokens is not None and longest_turn(s) > c.max_new_tokens for s in fits]
        record["too_long"], record["turn_too_long"] = len(samples) - len(fits), sum(long_turn)
        if record["too_long"]:
            log.warning("sft: %d of %d demonstrations longer than max_context=%d left out", record["too_long"],
                        len(samples), c.max_context)
        if record["turn_too_long"]:
            log.warning("sft: %d of %d demonstrations have a turn longer than sampling.max_new_tokens=%d, which the "
                        "sampler would cut off: %s", record["turn_too_long"], len(fits), c.max_new_tokens,
                        "kept (keep_long_turns=false leaves them out)" if c.keep_long_turns else "left out")
        return fits if c.keep_long_turns else [s for s, long in zip(fits, long_turn) if not long]

    async def run(self, runner: Runner, before: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Demonstrations, the epochs, the checkpoint; returns the metrics rows written. `before`:
        figures of the policy before training (held-out evaluation), logged in the first row."""
        c = self.cfg
        train, held_out = await self.demonstrations(runner)
        if not held_out:
            log.warning("no held-out demonstrations (the env has too few tasks, or eval.n_tasks=0): no held-out NLL")
        rng = np.random.default_rng(c.seed)
        steps = 0
        row: dict[str, Any] = {"step": 0, "epoch": 0, **(before or {}), "demos": len(train), "heldout_demos": len(held_out),
                               "heldout_nll": await on_learner_thread(mean_nll, self.learner, held_out)}
        rows = [row]
        self.runlog.metrics(row)
        log.info("sft: %d demonstrations (%d loss tokens), %d held out; held-out NLL %s", len(train),
                 sum(sum(s.loss_mask) for s in train), len(held_out), _fmt(row["heldout_nll"]))
        for epoch in range(1, c.epochs + 1):
            t0 = time.monotonic()
            order = rng.permutation(len(train))
            losses, tokens = [], 0.0
            for i in range(0, len(order), c.batch_size):
                m = await on_learner_thread(self.learner.sft_step, [train[int(k)] for k in order[i:i + c.batch_size]])
                losses.append(m["loss"])
                tokens += m["loss_tokens"]
                steps += 1
            row = {"step": epoch, "epoch": epoch, "optimizer_steps": steps, "train_loss": float(np.mean(losses)),
                   "loss_tokens": tokens, "heldout_nll": await on_learner_thread(mean_nll, self.learner, held_out),
                   "timings": {"epoch_s": time.monotonic() - t0}}
            self.runlog.metrics(row)
            rows.append(row)
            log.info("sft epoch %d/%d: train loss %.4f, held-out NLL %s, %.1fs", epoch, c.epochs, row["train_loss"],
                     _fmt(row["heldout_nll"]), row["timings"]["epoch_s"])
        ckpt = await on_learner_thread(self.learner.save_checkpoint, self.runlog.checkpoints / "latest", c.epochs, 0)
        rows[-1]["model_path"] = str(Path(ckpt / "model").resolve())
        return rows


def summary(rows: list[dict[str, Any]]) -> str:
    """A finished run's line: its epochs, the held-out NLL before and after, and its checkpoint."""
    return (f"{rows[-1]['epoch']} epochs, held-out NLL {_fmt(rows[0]['heldout_nll'])} -> "
            f"{_fmt(rows[-1]['heldout_nll'])}, checkpoint {rows[-1]['model_path']}")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"
