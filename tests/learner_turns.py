"""Turn builders shared by the learner tests."""
from __future__ import annotations

from typing import Any

from agent.turn import Turn
from envs.base import NextState


def make_turn(
    episode: str = "e0",
    group: str = "g0",
    step: int = 0,
    n: int = 2,
    outcome: float | None = None,
    status: str = "ok",
    prm: dict[str, Any] | None = None,
    opd: dict[str, Any] | None = None,
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
        prm=prm or {},
        opd=opd or {},
        messages=messages or [{"role": "user", "content": "list files"}],
    )
