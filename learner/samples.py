"""A training sample: one turn's prompt and response ids with per-token advantages and mask."""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Sample:
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]  # the sampler's log-probs (Turn.rollout_logprobs), one per response token
    advantages: list[float]  # one per response token
    loss_mask: list[int]  # one per response token; 0 = no loss on that token
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)  # episode/task/group ids, step, version

    def __post_init__(self) -> None:
        n = len(self.response_ids)
        for name in ("rollout_logprobs", "advantages", "loss_mask"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Sample.{name} has {len(getattr(self, name))} entries for {n} response tokens")

    @property
    def n_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def trains(self) -> bool:
        """False for a fully masked sample: it counts in the batch size but has no loss."""
        return any(self.loss_mask)
