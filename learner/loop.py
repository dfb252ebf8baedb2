"""The experiment loop: rollouts -> next-state scoring -> advantages -> update -> weight sync.

Each RL step samples `tasks_per_step` tasks (training ids only: held-out ones are for evaluation),
runs `group_size` episodes of each, scores every turn as soon as its next state exists (scoring
never blocks generation), and, in a training mode, updates the learner and pushes the new
weights to the serving policy. With `max_staleness >= 1` the rollouts of step k+1 start before
step k trains, so serving never stops; every turn records the policy version that sampled it.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from typing import Any, Awaitable, Callable, Protocol

import numpy as np

from agent import host_memory
from agent.rollout import Episode, EpisodeJob, OnTurn
from agent.turn import Turn
from envs.base import Status, TaskSplit
from envs.mix import draw_weights, member_of
from learner import diagnostics
from learner.runlog import RunLog

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LoopConfig:
    steps: int
    tasks_per_step: int
    group_size: int
    seed: int
    max_staleness: int = 1
    task_ids: list[str] | None = None  # the training ids to draw from (None: every task of the env)
    eval_every: int = 1  # held-out figures every N updates (see eval_due); 0: never
    mix: dict[str, float] = dataclasses.field(default_factory=dict)  # env=mix: member -> sampling weight


@dataclasses.dataclass
class StepOutput:
    """What a training step reports back to the loop."""

    metrics: dict[str, Any]
    policy_version: int
    turns: list[Turn]  # the step's turns as trained on: scored, with their advantage summaries (turns.jsonl)
    score_wait_s: float = 0.0  # how long the step waited for scoring that had not finished during rollouts


class RolloutSource(Protocol):
    """Where episodes come from: agent/rollout.py's Runner, agent/via_proxy.py's ProxyRollouts."""

    async def task_ids(self) -> list[str]: ...

    async def task_split(self, n_held_out: int, seed: int) -> TaskSplit: ...

    async def run(self, jobs: list[EpisodeJob], on_turn: OnTurn | None = None) -> list[Episode]:
        """The episodes of `jobs`; each turn goes to `on_turn` as soon as its next state exists."""
        ...

    def close(self) -> None: ...


class Trainer(Protocol):
    """What the loop drives in a training mode (learner/training.py's Training)."""

    def on_turn(self, turn: Turn) -> Awaitable[Turn] | None:
        """A turn whose next state exists: its scoring starts (generation never waits on it,
        except rollout.branch.at=disagree, for the votes); returns the scoring (None: none)."""
        ...

    async def train(self, step: int, turns: list[Turn]) -> StepOutput:
        """One update on the step's turns, as the runner recorded them (unscored): the trainer
        waits for their scores itself. Its metrics, the new policy version, the turns as scored."""
        ...

    async def after_step(self, step: int, last: bool) -> None:
        """After the step's metrics are written (the checkpoint, so a resume never repeats a logged step)."""
        ...


# Held-out figures of the current policy (e.g. personalization); see learner/evaluation.py.
Evaluator = Callable[[], Awaitable[dict[str, Any]]]


def make_jobs(task_ids: list[str], step: int, cfg: LoopConfig) -> list[EpisodeJob]:
    """Tasks for one step: a seeded draw, each task repeated `group_size` times (one group). In a
    mixture each draw is independent (with replacement) and picks member m with probability
    weight m / total, so the weights hold whatever the members' task counts."""
    rng = np.random.default_rng([cfg.seed, step])
    p = draw_weights(cfg.mix, task_ids) if cfg.mix else None
    replace = len(task_ids) < cfg.tasks_per_step or p is not None
    picks = rng.choice(len(task_ids), size=cfg.tasks_per_step, replace=replace, p=p)
    jobs = []
    for i, k in enumerate(picks):
        for g in range(cfg.group_size):
            jobs.append(EpisodeJob(
                episode_id=f"s{step}-t{i}-g{g}", task_id=task_ids[int(k)], group_id=f"s{step}-t{i}",
                seed=int(rng.integers(2**31)),
            ))
    return jobs


def eval_due(step: int, cfg: LoopConfig, first_step: int = 0) -> bool:
    """Whether row `step` (the policy after `step` updates) carries held-out figures: the run's
    first row, every `eval_every`-th, and the final evaluation-only row (step == cfg.steps)."""
    return cfg.eval_every > 0 and (step == first_step or step % cfg.eval_every == 0 or step == cfg.steps)


def rollout_metrics(episodes: list[Episode]) -> dict[str, Any]:
    turns = [t for e in episodes for t in e.turns]
    outcomes = [e.outcome for e in episodes if e.outcome is not None]
    statuses = Counter(t.status for t in turns)
    ep_status = Counter(e.status for e in episodes)
    n_turns = max(1, len(turns))
    return {
        "episodes": len(episodes),
        "turns": len(turns),
        "outcome_mean": float(np.mean(outcomes)) if outcomes else None,
        "success_rate": float(np.mean([o > 0 for o in outcomes])) if outcomes else None,
        "status_counts": dict(statuses),
        "episode_status_counts": dict(ep_status),
        "infra_error_rate": statuses.get(Status.INFRA_ERROR, 0) / n_turns,
        "timeout_rate": statuses.get(Status.TIMEOUT, 0) / n_turns,
        "turns_per_episode": len(turns) / max(1, len(episodes)),
        "response_tokens": sum(len(t.response_ids) for t in turns),
        "policy_versions": sorted({t.policy_version for t in turns}),
    }


MEMBER_FIGURES = ("episodes", "outcome_mean", "success_rate")


def member_metrics(episodes: list[Episode], members: list[str]) -> dict[str, Any]:
    """A mixture's figures per member (`env/<member>/outcome_mean`, ...), read from task ids."""
    out: dict[str, Any] = {}
    for m in members:
        r = rollout_metrics([e for e in episodes if member_of(e.job.task_id) == m])
        out.update({f"env/{m}/{k}": r[k] for k in MEMBER_FIGURES})
    return out


def headline(row: dict[str, Any]) -> list[str]:
    keys = ("reward_mean", "outcome_mean", "prm_score_mean", "opd_accept_rate", "heldout/pass@1", "personalization")
    return [f"{k}={row[k]:.3g}" for k in keys if isinstance(row.get(k), (int, float))]


def step_summary(row: dict[str, Any]) -> str:
    """The step's headline figures, for the one progress line per RL step."""
    parts = headline(row)
    if row.get("signal"):
        parts.append(diagnostics.summary(row["signal"]))
    train = row.get("train") or {}
    if "mismatch_abs_mean" in train:  # sampler vs learner log-probs on the trained tokens
        parts.append(f"mismatch |d|={train['mismatch_abs_mean']:.2g}/max {train['mismatch_abs_max']:.2g} "
                     f"kl={train['mismatch_kl']:.2g}")
        if "mismatch_abs_mean_current" in train and train.get("current_tokens", 0) < train.get("loss_tokens", 0):
            parts.append(f"(current weights' tokens: |d|={train['mismatch_abs_mean_current']:.2g})")
    t = row.get("timings", {})
    failed = sum(n for s, n in (row.get("episode_status_counts") or {}).items() if Status(s).is_infra)
    parts.append(f"{row.get('episodes', 0)} episodes{f' ({failed} failed)' if failed else ''}, {t.get('step_s', 0.0):.1f}s (rollouts {t.get('rollout_s', 0.0):.1f}s, "
                 f"train {t.get('train_s', 0.0):.1f}s)")
    if "memory" in row:
        parts.append(f"rss {row['memory']['rss_gb']:.1f} GB")
    return " ".join(parts)


async def _evaluate(evaluator: Evaluator) -> dict[str, Any]:
    with host_memory.PHASES.phase("eval"):
        return await evaluator()


async def run_loop(
    runner: RolloutSource,
    cfg: LoopConfig,
    runlog: RunLog,
    trainer: Trainer | None = None,
    evaluator: Evaluator | None = None,
    start_step: int = 0,
    policy_version: int = 0,
) -> list[dict[str, Any]]:
    """Run steps [start_step, cfg.steps); returns the metrics rows written."""
    task_ids = cfg.task_ids if cfg.task_ids is not None else await runner.task_ids()
    rows: list[dict[str, Any]] = []

    async def rollouts(step: int) -> tuple[list[Episode], float]:
        t0 = time.monotonic()
        on_turn = trainer.on_turn if trainer is not None else None
        with host_memory.PHASES.phase("rollouts"):
            return await runner.run(make_jobs(task_ids, step, cfg), on_turn=on_turn), time.monotonic() - t0

    nxt: asyncio.Task | None = asyncio.create_task(rollouts(start_step)) if start_step < cfg.steps else None
    t_last = time.monotonic()  # wall time per step counts overlapped rollouts once
    # Row k carries the held-out figures of the policy after k updates (measured before step k
    # trains) when eval_due(k); the figures after the last update go into one more,
    # evaluation-only row. Without a trainer the policy never changes: its first row has them.
    due = evaluator is not None and start_step < cfg.steps and eval_due(start_step, cfg, start_step)
    held_out = await _evaluate(evaluator) if due else {}
    try:
        for step in range(start_step, cfg.steps):
            assert nxt is not None
            episodes, t_roll = await nxt
            nxt = None
            if trainer is not None and cfg.max_staleness >= 1 and step + 1 < cfg.steps:
                nxt = asyncio.create_task(rollouts(step + 1))  # serve on while this step trains
            turns = [t for e in episodes for t in e.turns]
            row: dict[str, Any] = {"step": step}
            row.update(rollout_metrics(episodes))
            row.update(member_metrics(episodes, list(cfg.mix)))
            t1 = time.monotonic()
            t_score_wait = 0.0
            if trainer is not None:
                with host_memory.PHASES.phase("train"):
                    out = await trainer.train(step, turns)
                row.update(out.metrics)
                policy_version, turns, t_score_wait = out.policy_version, out.turns, out.score_wait_s
            else:
                row.setdefault("reward_mean", row["outcome_mean"])
            t_train = time.monotonic() - t1 - t_score_wait
            row.update(held_out)
            held_out = {}
            t2 = time.monotonic()
            if evaluator is not None and trainer is not None and eval_due(step + 1, cfg, start_step):
                held_out = await _evaluate(evaluator)
            t_eval = time.monotonic() - t2
            row["policy_version"] = policy_version
            row["memory"] = host_memory.usage_gb()
            now = time.monotonic()
            row["timings"] = {"rollout_s": t_roll, "score_wait_s": t_score_wait, "train_s": t_train,
                             "eval_s": t_eval, "step_s": now - t_last}
            t_last = now
            row["throughput"] = {"turns_per_s": row["turns"] / max(t_roll, 1e-9),
                                 "tokens_per_s": row["response_tokens"] / max(t_roll, 1e-9)}
            for key in ("reward_mean", "prm_score_mean", "opd_accept_rate"):
                row.setdefault(key, None)
            runlog.turns(turns)
            runlog.metrics(row)
            log.info("step %d/%d: %s", step + 1, cfg.steps, step_summary(row))
            rows.append(row)
            if trainer is not None:  # after the metrics, so a resume never repeats a logged step
                await trainer.after_step(step, step + 1 == cfg.steps)
            if nxt is None and step + 1 < cfg.steps:
                nxt = asyncio.create_task(rollouts(step + 1))
        if held_out and trainer is not None and rows:
            final = {"step": cfg.steps, "eval_only": True, "policy_version": policy_version, **held_out}
            runlog.metrics(final)
            log.info("held out after %d steps: %s", cfg.steps, " ".join(headline(final)))
            rows.append(final)
    finally:
        if nxt is not None and not nxt.done():
            nxt.cancel()
            await asyncio.gather(nxt, return_exceptions=True)
    return rows
