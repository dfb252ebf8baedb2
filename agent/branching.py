"""Where a trunk episode forks into continuations (`rollout.branch`, docs/forks.md).

The runner (agent/rollout.py) runs the trunk; before the step chosen here it forks the env and
the actor, and runs `k` continuations to the episode's end beside the trunk. With
`at=disagree` a fork is taken before every step and kept only where the judge's PRM votes on
the trunk's turn at that step disagree (the runner waits for the turn's scoring there).
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import numpy as np

AT = ("none", "every", "every_k", "disagree")


@dataclasses.dataclass(frozen=True)
class Branching:
    at: str = "none"  # none | every | every_k | disagree
    k: int = 2  # continuations per branch point
    every: int = 2  # at=every_k: branch before steps 0, every, 2 every, ...

    def __post_init__(self) -> None:
        if self.at not in AT:
            raise ValueError(f"rollout.branch.at={self.at!r}: choose one of {', '.join(AT)}")
        if self.k < 1 or self.every < 1:
            raise ValueError(f"rollout.branch.k and rollout.branch.every must be at least 1 (got k={self.k}, every={self.every})")

    @property
    def on(self) -> bool:
        return self.at != "none"

    def forks_before(self, step: int) -> bool:
        """Whether the trunk forks before acting at `step` (at=disagree: always; the fork is
        kept only where `keeps` says so)."""
        return self.at in ("every", "disagree") or (self.at == "every_k" and step % self.every == 0)

    @property
    def needs_votes(self) -> bool:
        return self.at == "disagree"


def disagree(votes: Iterable[int | None]) -> bool:
    """Whether the valid votes on a turn are not all the same."""
    return len({v for v in votes if v is not None}) > 1


def branch_id(step: int, j: int) -> str:
    """The id of the j-th continuation forked before `step` (a turn's `branch_id`)."""
    return f"b{step}.{j}"


def branch_seed(seed: int, step: int, j: int) -> int:
    """A continuation's own sampling seed, fixed by its trunk's seed and place (a branch with the
    trunk's seed would sample the trunk's tokens again)."""
    return int(np.random.SeedSequence([seed, step, j + 1]).generate_state(1)[0] % 2**31)
