"""A Weights & Biases sink for the RunLog: the figures of metrics.jsonl, and a few turns per step.

One W&B run per (env, mode, seed) run dir, grouped by experiment, its `job_type` train or eval
(what W&B's run table filters and groups by). The sampled turns go to one `trajectories` table
logged in INCREMENTAL mode (each step sends only its new rows; the W&B app shows one table that
grows, not a table per step), and, given a `panel` renderer, to a `tokens` HTML panel per step:
each sampled response with its tokens coloured by their advantage (the run viewer's colouring,
experiments/view). Offline unless WANDB_API_KEY
is set (offline makes no network calls; online without a network blocks for minutes), and its
files live inside the run dir (run_dir/wandb/). W&B is a mirror, never a dependency: a failure
to start or to log is one warning and the run goes on with metrics.jsonl alone.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
from pathlib import Path
from typing import Any, Callable, Iterable

from agent.turn import Turn

log = logging.getLogger(__name__)

TABLE_COLUMNS = ["step", "episode_id", "task_id", "turn", "status", "prompt_tail", "action", "next_state",
                 "prm_votes", "prm_score", "hint", "opd_accepted", "advantage", "outcome"]
PROMPT_TAIL = 600  # characters of the prompt's last messages shown per row
CELL = 1000  # characters per text cell


def flatten(row: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Nested dicts -> {"a/b": number}; non-numbers (lists, strings, None, NaN) are left out."""
    out: dict[str, float] = {}
    for k, v in row.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, f"{key}/"))
        elif isinstance(v, bool):
            out[key] = float(v)
        elif isinstance(v, (int, float)) and math.isfinite(v):
            out[key] = v
    return out


def wandb_mode(requested: str) -> str:
    """`disabled` stays disabled; otherwise WANDB_MODE from the environment wins, else online
    exactly when WANDB_API_KEY is set, else offline."""
    if requested == "disabled":
        return "disabled"
    forced = os.environ.get("WANDB_MODE")
    if forced in ("offline", "online", "disabled"):
        return forced
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def _cut(text: str, n: int, tail: bool = False) -> str:
    if len(text) <= n:
        return text
    return "..." + text[-n:] if tail else text[:n] + "..."


def _prompt_tail(turn: Turn) -> str:
    msgs = turn.messages[-2:]
    text = "\n".join(f"[{m.get('role')}] {c if isinstance(c := m.get('content'), str) else json.dumps(c, default=str)}" for m in msgs)
    return _cut(text, PROMPT_TAIL, tail=True)


def table_row(step: int, turn: Turn) -> list[Any]:
    ns = turn.next_state
    prm, opd = turn.prm, turn.opd
    adv = turn.meta.get("advantage")
    adv_text = "" if adv is None else ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in adv.items())
    return [step, turn.episode_id, turn.task_id, turn.step_index, turn.status, _prompt_tail(turn),
            _cut(turn.action, CELL), _cut(f"[{ns.role}/{ns.kind}] {ns.content}", CELL),
            str(prm.votes) if prm else "", prm.score if prm else None, _cut(opd.hint if opd else "", CELL),
            opd.accepted if opd else None, adv_text, turn.outcome]


class WandbSink:
    """RunLog sink: `turns(turns)` buffers a step's turns, `metrics(row)` logs the row, appends
    `rows_per_step` sampled turns to the trajectory table and logs their token panel, at W&B step
    row["step"]; `close()` finishes. `panel(turns)` gives the panel's HTML (None: no panel)."""

    def __init__(self, run_dir: str | Path, *, project: str, group: str, name: str, config: dict[str, Any],
                 job_type: str = "train", mode: str = "offline", rows_per_step: int = 4, seed: int = 0,
                 tags: Iterable[str] = (), panel: Callable[[list[Turn]], str] | None = None) -> None:
        self.rows_per_step = rows_per_step
        self.panel = panel
        self._rng = random.Random(seed)
        self._pending: list[Turn] = []
        self.run = None
        mode = wandb_mode(mode)
        if mode == "disabled":
            return
        try:
            import wandb

            self._wandb = wandb
            self.run = wandb.init(
                project=project, group=group, name=name, job_type=job_type, config=config, dir=str(run_dir), mode=mode,
                tags=list(tags), reinit="finish_previous",
                settings=wandb.Settings(init_timeout=60, silent=True, console="off", disable_git=True,
                                        x_disable_stats=True, finish_timeout=60),
            )
            self._table = wandb.Table(columns=TABLE_COLUMNS, log_mode="INCREMENTAL")
        except Exception as e:  # W&B mirrors metrics.jsonl; the run must not depend on it
            log.warning("W&B disabled for this run (%s: %s); metrics.jsonl still has every figure", type(e).__name__, e)
            self.run = None

    @property
    def active(self) -> bool:
        return self.run is not None

    def turns(self, turns: Iterable[Turn]) -> None:
        self._pending.extend(turns)

    def metrics(self, row: dict[str, Any]) -> None:
        pending, self._pending = self._pending, []
        if self.run is None:
            return
        step = int(row["step"])
        data: dict[str, Any] = flatten(row)
        if pending and self.rows_per_step > 0:
            picks = self._rng.sample(pending, min(self.rows_per_step, len(pending)))
            for t in picks:
                self._table.add_data(*table_row(step, t))
            data["trajectories"] = self._table
            if self.panel is not None:
                try:
                    data["tokens"] = self._wandb.Html(self.panel(picks))
                except Exception as e:  # a panel is a view of the table's turns: the figures still go
                    log.warning("W&B token panel skipped at step %d (%s: %s)", step, type(e).__name__, e)
        try:
            self.run.log(data, step=step)
        except Exception as e:
            log.warning("W&B log failed at step %d (%s); W&B stops for this run", step, e)
            self.close()

    def close(self) -> None:
        run, self.run = self.run, None
        if run is not None:
            try:
                run.finish()
            except Exception as e:
                log.warning("W&B finish failed (%s)", e)
