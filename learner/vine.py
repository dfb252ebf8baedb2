"""Monte-Carlo values on episode trees (rollout.branch, docs/forks.md): mode=vine's per-step
values and the judge audit.

A turn's value is the mean outcome of the paths through it: its own path and every
continuation forked from that path after it (`parent_turn` links the tree). Siblings are the
turns that act on one state: the trunk's turn at a branch point and the first turns of the
continuations forked there (the same tree and parent turn). Paths without an outcome (ended by
infrastructure or a deadline) count in no value.
"""
from __future__ import annotations

import collections
import math
from typing import Any, Iterable

from agent.turn import Turn
from learner.parsing import mean_vote


def turn_values(turns: Iterable[Turn]) -> dict[str, float]:
    """turn key -> mean outcome of the paths through the turn (absent: no path with an outcome)."""
    turns = list(turns)
    outcome = {t.episode_id: t.outcome for t in turns}
    children: dict[str | None, list[Turn]] = collections.defaultdict(list)
    for t in turns:
        children[t.parent_turn].append(t)
    paths: dict[str, set[str]] = {}

    def through(t: Turn) -> set[str]:  # the episode ids of t's subtree
        if t.key not in paths:
            out = {t.episode_id}
            stack = list(children.get(t.key, ()))
            while stack:
                c = stack.pop()
                out.add(c.episode_id)
                stack.extend(children.get(c.key, ()))
            paths[t.key] = out
        return paths[t.key]

    values = {}
    for t in turns:
        got = [float(outcome[e]) for e in through(t) if outcome.get(e) is not None]
        if got:
            values[t.key] = sum(got) / len(got)
    return values


def sibling_groups(turns: Iterable[Turn]) -> list[list[Turn]]:
    """The turns of each branch point (two or more acting on one state), in the order given."""
    groups: dict[tuple[str, str | None], list[Turn]] = collections.defaultdict(list)
    for t in turns:
        groups[(t.tree_id or t.episode_id, t.parent_turn)].append(t)
    return [g for g in groups.values() if len(g) >= 2]


def pearson(xs: list[float], ys: list[float]) -> tuple[float | None, str | None]:
    """Pearson's r, or (None, why) where it is undefined: fewer than two pairs, or a side whose
    values are all equal (zero variance: no linear relation can be measured)."""
    if len(xs) < 2:
        return None, "fewer_than_2_turns"
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None, {(True, True): "constant_both", (True, False): "constant_prm", (False, True): "constant_value"}[(sxx == 0, syy == 0)]
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    return sxy / math.sqrt(sxx * syy), None


def judge_audit(turns: Iterable[Turn]) -> dict[str, Any]:
    """How well the judge's PRM score (the mean valid vote) of each branched turn tracks its
    Monte-Carlo value: Pearson's r over the branch points' turns that have both (metrics
    `judge_audit/*`; r is None where undefined, `undefined` says why)."""
    turns = list(turns)
    values = turn_values(turns)
    pairs = [(mean_vote(t.prm.votes), values[t.key]) for g in sibling_groups(t for t in turns if not t.status.is_infra) for t in g
             if t.key in values and t.prm is not None and any(v is not None for v in t.prm.votes)]
    r, why = pearson([p for p, _ in pairs], [v for _, v in pairs])
    return {"pearson": r, "turns": len(pairs), "undefined": why}
