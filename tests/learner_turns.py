"""Turn builders shared by the learner tests."""
from __future__ import annotations

from typing import Any

from agent.turn import OPDSignal, PRMScore, Turn
from envs.base import NextState


def prm_score(**fields: Any) -> PRMScore:
    """A PRMScore with the fields given, the rest empty."""
    return PRMScore(**{"votes": [], "score": 0, "texts": [], **fields})


def opd_signal(**fields: Any) -> OPDSignal:
    """An OPDSignal with the fields given, the rest empty (no hint, not accepted)."""
    return OPDSignal(**{"votes": [], "hints": [], "texts": [], "hint": "", "accepted": False, **fields})


def make_turn(
    episode: str = "e0",
    group: str = "g0",
    step: int = 0,
    n: int = 2,
    outcome: float | None = None,
    status: str = "ok",
    prm: dict[str, Any] | None = None,  # PRMScore's fields (prm_score)
    opd: dict[str, Any] | None = None,  # OPDSignal's fields (opd_signal)
    logprobs: list[float] | None = None,
    next_state: NextState | None = None,
    messages: list[dict[str, Any]] | None = None,
    action: str = "ls",
) -> Turn:
    return Turn(
        episode_id=episode,
        task_id=f"task-{group}",
        group_id=group,
        step_index=step,
        policy_version=0,
        prompt_ids=[1, 2, 3],
        response_ids=list(range(10, 10 + n)),
        rollout_logprobs=logprobs if logprobs is not None else [-1.0] * n,
        action=action,
        next_state=next_state or NextState("tool", "out", "shell", {}),
        status=status,
        outcome=outcome,
        prm=prm_score(**prm) if prm else None,
        opd=opd_signal(**opd) if opd else None,
        messages=messages or [{"role": "user", "content": "list files"}],
    )
