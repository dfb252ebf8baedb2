"""A Turn: one assistant action and what followed it (docs/architecture.md, "Tokens and turns").

The learner builds training samples from turns; `turns.jsonl` holds one `Turn.to_json()` per
line. Token ids and log-probs are the sampler's, never re-tokenized.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from envs.base import NextState


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
    # them with a hint; the judge reads the context). Not written to turns.jsonl in full.
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    tools: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["next_state"] = self.next_state.to_dict()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Turn:
        d = dict(d)
        d["next_state"] = NextState.from_dict(d["next_state"])
        return cls(**d)
