"""Signal yield: how much of a step's experience became gradient, and why the rest did not.

A run that cannot learn must say so in its own output. Every training step reports the PRM
vote distribution, the hints accepted and why the others were dropped, the share of task groups
whose advantages are all zero, and the share of response tokens that carry gradient (loss mask
1 and a nonzero advantage); when that share is 0, `why` says what stopped it.
"""
from __future__ import annotations

import collections
from typing import Any

from agent.turn import OPDSignal, Turn
from envs.base import Status
from learner.parsing import MIN_HINT_CHARS
from learner.samples import Sample

# dropped_by_reason keys of learner.advantages, in words
REASONS = {
    "constant_group": "every episode of a task group got the same outcome",
    "constant_bucket": "equal rewards at a step index across a group",
    "singleton_bucket": "a lone step with a constant group",
    "no_outcome": "episodes without an outcome",
    "no_hint": "no accepted hint",
    "no_signal": "neither a PRM vote nor an accepted hint",
    "empty_response": "empty responses",
    "bad_logprobs": "responses without log-probs",
}


def hint_fate(opd: OPDSignal) -> str:
    """Why a turn's hint was (not) used: accepted, or the reason it was dropped."""
    if opd.accepted:
        return "accepted"
    if opd.error:
        return opd.error.partition(":")[0] + "_error"  # judge_error | teacher_error
    votes = opd.votes
    if not votes:
        return "no_votes"
    if all(v is None for v in votes):
        return "invalid_votes"
    if 1 not in votes:
        return "no_positive_vote"
    return f"hint_under_{MIN_HINT_CHARS + 1}_chars"


def signal_yield(turns: list[Turn], eligible: list[Turn], samples: list[Sample],
                 dropped: dict[str, int]) -> dict[str, Any]:
    """The step's signal figures (see the module docstring)."""
    out: dict[str, Any] = {}
    prm = [t.prm for t in eligible if t.prm is not None]
    if prm:
        votes = collections.Counter("invalid" if v is None else f"{v:+d}" if v else "0" for p in prm for v in p.votes)
        out["prm_votes"] = {k: votes.get(k, 0) for k in ("+1", "0", "-1", "invalid")}
    opd = [t.opd for t in eligible if t.opd is not None]
    if opd:
        fates = collections.Counter(hint_fate(o) for o in opd)
        out["hints_accepted"] = fates.pop("accepted", 0)
        out["hints_dropped"] = dict(fates)
    live = {t.group_id: False for t in eligible}  # group -> has a token with gradient
    grad_tokens = 0
    for s in samples:
        n = sum(1 for a, m in zip(s.advantages, s.loss_mask) if m and a != 0.0)
        grad_tokens += n
        group = s.meta.get("group_id")
        live[group] = live.get(group, False) or n > 0
    response_tokens = sum(len(t.response_ids) for t in turns)
    out["groups"] = len(live)
    out["zero_advantage_group_share"] = sum(1 for v in live.values() if not v) / len(live) if live else None
    out["gradient_token_share"] = grad_tokens / response_tokens if response_tokens else 0.0
    if grad_tokens == 0:
        out["why"] = why_no_signal(turns, eligible, dropped, out)
    return out


def why_no_signal(turns: list[Turn], eligible: list[Turn], dropped: dict[str, int], figures: dict[str, Any]) -> str:
    """One line saying what kept every token of the step from carrying gradient."""
    if not turns:
        return "no turns"
    if not eligible:
        return f"all {len(turns)} turns failed in the infrastructure (infra_error/timeout)"
    parts = []
    statuses = collections.Counter(t.status for t in eligible)
    bad = {k: v for k, v in statuses.items() if k != Status.OK}
    if bad:
        parts.append(", ".join(f"{v}/{len(eligible)} turns {k}" for k, v in sorted(bad.items(), key=lambda kv: -kv[1])))
    outcomes = sorted({t.outcome for t in eligible if t.outcome is not None})
    for key, n in sorted(dropped.items(), key=lambda kv: -kv[1]):
        text = REASONS.get(key, key)
        if key == "constant_group" and len(outcomes) == 1:
            text += f" (all {outcomes[0]:+g})"
        parts.append(f"{text}: {n} turns")
    votes = figures.get("prm_votes")
    if votes and votes["+1"] == votes["-1"] == 0:
        parts.append(f"PRM votes all 0 or invalid ({votes['0']} zero, {votes['invalid']} invalid)")
    if "hints_dropped" in figures and not figures.get("hints_accepted"):
        parts.append("no hint accepted (" + ", ".join(f"{k} {v}" for k, v in figures["hints_dropped"].items()) + ")")
    return "; ".join(parts) or "every sample has advantage 0"


def summary(signal: dict[str, Any]) -> str:
    """The step line's part: token share with gradient, flat groups, votes, hints; or why none."""
    if "why" in signal:
        return f"NO LEARNING SIGNAL: {signal['why']}"
    parts = [f"grad tokens {signal['gradient_token_share']:.0%}"]
    if signal.get("zero_advantage_group_share") is not None:
        parts.append(f"flat groups {signal['zero_advantage_group_share']:.0%}")
    if "prm_votes" in signal:
        v = signal["prm_votes"]
        parts.append(f"votes +{v['+1']}/0:{v['0']}/-{v['-1']}/inv {v['invalid']}")
    if "hints_accepted" in signal:
        parts.append(f"hints {signal['hints_accepted']} ok, {sum(signal['hints_dropped'].values())} dropped")
    return "signal: " + ", ".join(parts)
