"""A Turn: one assistant action and what followed it (docs/architecture.md, "Tokens and turns").

The learner builds training samples from turns. `turn_record` is the one JSON form of a turn:
the run log's turns.jsonl and the live-user proxy's turns-v<version>.jsonl both write it, one per
line, and `Turn.from_json` reads it back. Token ids and log-probs are the sampler's, never
re-tokenized.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from agent.json_safe import json_safe
from envs.base import NextState

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Turn:
    episode_id: str
    task_id: str
    group_id: str
    step_index: int
    policy_version: int
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]
    action: str
    next_state: NextState
    status: str
    finish_reason: str = ""
    outcome: float | None = None  # the episode's outcome, filled on every turn at episode end
    episode_done: bool = False  # the last turn of its episode
    prm: dict[str, Any] = dataclasses.field(default_factory=dict)  # {votes, score, texts}
    opd: dict[str, Any] = dataclasses.field(default_factory=dict)  # {votes, hint, accepted, ...}
    # The chat messages the prompt was rendered from, and the tools (the OPD teacher re-renders
    # them with a hint; the judge reads the context).
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    tools: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Turn:
        d = dict(d)
        d["next_state"] = NextState.from_dict(d["next_state"])
        return cls(**d)


def turn_record(turn: Turn) -> dict[str, Any]:
    """Every field of the turn as plain JSON values (agent/json_safe.py); never fails on content:
    what JSON or UTF-8 cannot hold is escaped, with a warning."""
    escaped: list[str] = []
    record = json_safe(turn, escaped)
    if escaped:
        log.warning("turn %s step %d: unencodable content escaped in its record (%s)", turn.episode_id,
                    turn.step_index, "; ".join(escaped))
    return record


def turn_line(turn: Turn) -> str:
    """The turn's JSONL line (UTF-8 text, not ASCII escapes)."""
    return json.dumps(turn_record(turn), ensure_ascii=False) + "\n"
