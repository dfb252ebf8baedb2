"""Scored turns -> training samples, one per turn, per mode (docs/architecture.md, "Modes and loss").

Each mode's advantage is described with its entry in learner/modes.py. Std is the sample std
(n - 1), as GRPO's. Turns with an infra status (infra_error, timeout) leave the batch and every
group statistic; so do turns without an outcome in the outcome-based modes (an episode ended by
an infra failure has none).
"""
from __future__ import annotations

import collections
import math
from typing import Any, Iterable

from agent.turn import Turn
from envs.base import Status
from learner.diagnostics import signal_yield
from learner.modes import RL_MODES, mode as mode_of, step_reward
from learner.samples import Sample
from learner.vine import sibling_groups, turn_values

EPS = 1e-6


def zscores(values: list[float]) -> list[float] | None:
    """(v - mean) / sample std; None when there are fewer than two values or all are equal."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    if std < EPS:
        return None
    return [(v - mean) / std for v in values]


def _trainable(turn: Turn) -> str | None:
    """Why a turn cannot become a sample (None when it can)."""
    if not turn.response_ids:
        return "empty_response"
    if len(turn.rollout_logprobs) != len(turn.response_ids):
        return "bad_logprobs"
    return None


def _sample(turn: Turn, advantages: list[float], mask: list[int], mode: str) -> Sample:
    """Every sample is made here: response tokens that carry a user's secret or personal data
    (`meta["private_tokens"]`, set by the live-user proxy) never get a loss."""
    private = set((turn.meta or {}).get("private_tokens") or ())
    if private:
        mask = [0 if i in private else m for i, m in enumerate(mask)]
    meta = {
        "episode_id": turn.episode_id,
        "task_id": turn.task_id,
        "group_id": turn.group_id,
        "step_index": turn.step_index,
        "policy_version": turn.policy_version,
        "mode": mode,
    }
    return Sample(list(turn.prompt_ids), list(turn.response_ids), [float(x) for x in turn.rollout_logprobs], advantages, mask, meta)


def _broadcast(turn: Turn, value: float, mode: str, mask: int = 1) -> Sample:
    n = len(turn.response_ids)
    return _sample(turn, [float(value)] * n, [mask] * n, mode)


def teacher_term(turn: Turn) -> list[float] | None:
    """teacher_logp - rollout_logp per token, or None when the turn has no accepted hint."""
    opd = turn.opd
    if opd is None or not opd.accepted or opd.teacher_logprobs is None or len(opd.teacher_logprobs) != len(turn.response_ids):
        return None
    teacher = opd.teacher_logprobs
    return [float(t) - float(o) for t, o in zip(teacher, turn.rollout_logprobs)]


def _prm_score(turn: Turn) -> int:
    return turn.prm.score if turn.prm is not None else 0


def _has_next_state(turn: Turn) -> bool:
    ns = turn.next_state
    return ns is not None and bool(ns.content or ns.data)


def build_samples(
    turns: Iterable[Turn],
    mode: str,
    w_opd: float = 1.0,
    w_rl: float = 1.0,
    prm_coef: float = 1.0,
) -> tuple[list[Sample], dict[str, Any]]:
    """Samples for `mode` and the figures to log (counts, rates, signal means)."""
    if mode not in RL_MODES:
        raise ValueError(f"unknown training mode {mode!r}; choose one of {RL_MODES}")
    turns = list(turns)
    status_counts = collections.Counter(t.status for t in turns)
    eligible = [t for t in turns if not t.status.is_infra]
    dropped: collections.Counter[str] = collections.Counter()
    samples: list[Sample] = []

    def emit(turn: Turn, make) -> None:
        why = _trainable(turn)
        if why:
            dropped[why] += 1
        else:
            samples.append(make())

    if mode_of(mode).outcome:
        with_outcome = [t for t in eligible if t.outcome is not None]
        if len(with_outcome) < len(eligible):
            dropped["no_outcome"] += len(eligible) - len(with_outcome)
        if mode == "outcome":
            _outcome(with_outcome, emit, dropped)
        elif mode == "vine":
            _vine(with_outcome, turn_values(turns), emit, dropped)
        else:
            _integrated(with_outcome, prm_coef, emit, dropped)
    elif mode == "binary":
        _binary(eligible, emit)
    else:
        for t in eligible:
            term = teacher_term(t)
            r = _prm_score(t) if mode == "combine" else 0
            if term is None and r == 0:
                dropped["no_hint" if mode == "opd" else "no_signal"] += 1
                continue
            if term is None:
                term = [0.0] * len(t.response_ids)
            adv = [w_opd * x + w_rl * r for x in term] if mode == "combine" else term
            emit(t, lambda t=t, adv=adv: _sample(t, adv, [1] * len(t.response_ids), mode))

    return samples, _stats(turns, eligible, samples, dropped, status_counts)


def _outcome(turns: list[Turn], emit, dropped: collections.Counter) -> None:
    groups: dict[str, dict[str, list[Turn]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for t in turns:
        groups[t.group_id][t.episode_id].append(t)
    for episodes in groups.values():
        eps = list(episodes.values())
        z = zscores([float(e[0].outcome) for e in eps])
        if z is None:
            dropped["constant_group"] += sum(len(e) for e in eps)
            continue
        for e, a in zip(eps, z):
            for t in e:
                emit(t, lambda t=t, a=a: _broadcast(t, a, "outcome"))


def _vine(turns: list[Turn], values: dict[str, float], emit, dropped: collections.Counter) -> None:
    """Each branch point's turns z-scored by their Monte-Carlo values (learner/vine.py; every
    turn here has an outcome, so a value); a turn at no branch point has no sibling to compare
    with and drops out."""
    branched = set()
    for group in sibling_groups(turns):
        branched.update(map(id, group))
        z = zscores([values[t.key] for t in group])
        if z is None:
            dropped["constant_state"] += len(group)
            continue
        for t, a in zip(group, z):
            emit(t, lambda t=t, a=a: _broadcast(t, a, "vine"))
    alone = sum(1 for t in turns if id(t) not in branched)
    if alone:
        dropped["unbranched"] += alone


def _integrated(turns: list[Turn], coef: float, emit, dropped: collections.Counter) -> None:
    reward = {id(t): step_reward(t.outcome, t.prm.votes if t.prm is not None else [], coef) for t in turns}
    groups: dict[str, list[Turn]] = collections.defaultdict(list)
    for t in turns:
        groups[t.group_id].append(t)
    for group in groups.values():
        buckets: dict[int, list[Turn]] = collections.defaultdict(list)
        for t in group:
            buckets[t.step_index].append(t)
        pooled = zscores([reward[id(t)] for t in group])
        pooled_by_turn = {id(t): z for t, z in zip(group, pooled or [])}
        for bucket in buckets.values():
            if len(bucket) == 1:
                if pooled is None:
                    dropped["singleton_bucket"] += 1
                    continue
                z = [pooled_by_turn[id(bucket[0])]]
            else:
                z = zscores([reward[id(t)] for t in bucket])
                if z is None:
                    dropped["constant_bucket"] += len(bucket)
                    continue
            for t, a in zip(bucket, z):
                emit(t, lambda t=t, a=a: _broadcast(t, a, "integrated"))


def _binary(turns: list[Turn], emit) -> None:
    sessions: dict[str, list[Turn]] = collections.defaultdict(list)
    for t in turns:
        sessions[t.episode_id].append(t)
    for session in sessions.values():
        session.sort(key=lambda t: t.step_index)
        keep = None
        if all(_prm_score(t) == 0 or _trainable(t) for t in session):
            keep = next((t for t in session if _has_next_state(t) and not _trainable(t)), None)
        for t in session:
            r = _prm_score(t)
            emit(t, lambda t=t, r=r: _broadcast(t, r, "binary", mask=int(r != 0 or t is keep)))


def _stats(turns: list[Turn], eligible: list[Turn], samples: list[Sample], dropped: collections.Counter, status_counts: collections.Counter) -> dict[str, Any]:
    n = len(turns)
    infra = n - len(eligible)
    prm_scores = [t.prm.score for t in eligible if t.prm is not None]
    opd = [t.opd for t in eligible if t.opd is not None]
    tokens = [(a, m) for s in samples for a, m in zip(s.advantages, s.loss_mask) if m]
    return {
        "turns": n,
        "status_counts": dict(status_counts),
        "infra_excluded": infra,
        "infra_rate": infra / n if n else 0.0,
        "timeout_rate": status_counts.get(Status.TIMEOUT, 0) / n if n else 0.0,
        "samples": len(samples),
        "samples_training": sum(1 for s in samples if s.trains),
        "samples_masked": sum(1 for s in samples if not s.trains),
        "dropped": sum(dropped.values()),
        "dropped_by_reason": dict(dropped),
        "prm_score_mean": sum(prm_scores) / len(prm_scores) if prm_scores else None,
        "opd_accept_rate": sum(1 for o in opd if o.accepted) / len(opd) if opd else None,
        "advantage_mean": sum(a for a, _ in tokens) / len(tokens) if tokens else None,
        "advantage_abs_mean": sum(abs(a) for a, _ in tokens) / len(tokens) if tokens else None,
        "loss_tokens": len(tokens),
        "signal": signal_yield(turns, eligible, samples, dict(dropped)),
    }
