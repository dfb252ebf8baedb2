"""Advantages per mode against hand-computed examples (learner/advantages.py)."""
from __future__ import annotations

import math

import pytest

from envs.base import NextState
from learner.advantages import build_samples
from tests.learner_turns import make_turn

approx = pytest.approx


def by_key(samples):
    return {(s.meta["episode_id"], s.meta["step_index"]): s for s in samples}


def test_outcome_zscore_broadcast_and_exclusions():
    turns = [
        make_turn("e0", "g0", 0, outcome=1.0), make_turn("e0", "g0", 1, outcome=1.0),
        make_turn("e1", "g0", 0, outcome=0.0),
        make_turn("e2", "g0", 0, outcome=0.0),
        make_turn("e3", "g0", 0, status="infra_error", outcome=None),  # leaves batch and stats
        make_turn("e4", "g0", 0, status="timeout", outcome=1.0),  # would change the mean if counted
        make_turn("e5", "g1", 0, outcome=1.0), make_turn("e6", "g1", 0, outcome=1.0),  # equal rewards
    ]
    samples, stats = build_samples(turns, "outcome")
    s = by_key(samples)
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # sample std of [1, 0, 0]
    assert set(s) == {("e0", 0), ("e0", 1), ("e1", 0), ("e2", 0)}
    assert s["e0", 0].advantages == approx([(2 / 3) / std] * 2)  # 1.1547, on every token
    assert s["e0", 1].advantages == approx([1.1547005] * 2)
    assert s["e1", 0].advantages == approx([-0.5773503] * 2)
    assert all(x.loss_mask == [1, 1] for x in samples)
    assert s["e0", 0].rollout_logprobs == [-1.0, -1.0]
    assert stats["infra_excluded"] == 2 and stats["infra_rate"] == approx(2 / 8)
    assert stats["timeout_rate"] == approx(1 / 8)
    assert stats["status_counts"] == {"ok": 6, "infra_error": 1, "timeout": 1}
    assert stats["dropped_by_reason"] == {"constant_group": 2}


def test_binary_mask_and_at_least_one():
    empty = NextState("tool", "", "shell", {})
    turns = [
        make_turn("e0", step=0, prm={"votes": [0], "score": 0}),
        make_turn("e0", step=1, prm={"votes": [1, 1, -1], "score": 1}),
        make_turn("e0", step=2, prm={"votes": [-1], "score": -1}),
        # e1: no nonzero score; step 0 has no next state, so step 1 is the kept one
        make_turn("e1", step=1, prm={"votes": [0], "score": 0}),
        make_turn("e1", step=0, prm={"votes": [1, -1], "score": 0}, next_state=empty),
        make_turn("e1", step=2, prm={"votes": [None], "score": 0}),
        make_turn("e1", step=3, status="infra_error", prm={}),
    ]
    samples, stats = build_samples(turns, "binary")
    s = by_key(samples)
    assert len(samples) == 6  # infra turn excluded
    assert (s["e0", 0].advantages, s["e0", 0].loss_mask) == ([0, 0], [0, 0])
    assert (s["e0", 1].advantages, s["e0", 1].loss_mask) == ([1, 1], [1, 1])
    assert (s["e0", 2].advantages, s["e0", 2].loss_mask) == ([-1, -1], [1, 1])
    assert s["e1", 0].loss_mask == [0, 0]
    assert (s["e1", 1].advantages, s["e1", 1].loss_mask) == ([0, 0], [1, 1])  # the kept one
    assert s["e1", 2].loss_mask == [0, 0]
    assert stats["samples_training"] == 3 and stats["samples_masked"] == 3
    assert stats["prm_score_mean"] == approx(0.0)
    assert stats["infra_excluded"] == 1


def test_opd_teacher_minus_old_and_drops():
    turns = [
        make_turn("e0", step=0, logprobs=[-1.0, -1.0], opd={"accepted": True, "hint": "h" * 20, "teacher_logprobs": [-0.5, -2.0]}),
        make_turn("e0", step=1, opd={"accepted": False, "hint": ""}),
        make_turn("e0", step=2, opd={"accepted": True, "hint": "h" * 20, "teacher_logprobs": [-0.5]}),  # wrong length
        make_turn("e0", step=3),  # never scored
        make_turn("e0", step=4, status="timeout", opd={"accepted": True, "teacher_logprobs": [0.0, 0.0]}),
    ]
    samples, stats = build_samples(turns, "opd")
    assert len(samples) == 1
    assert samples[0].advantages == approx([0.5, -1.0])
    assert samples[0].loss_mask == [1, 1]
    assert stats["dropped_by_reason"] == {"no_hint": 3}
    assert stats["opd_accept_rate"] == approx(2 / 3)  # of the scored, non-infra turns


def test_combine_four_cases():
    hint = {"accepted": True, "hint": "h" * 20, "teacher_logprobs": [-0.5, -2.0]}
    turns = [
        make_turn("e0", step=0, prm={"score": 1}, opd=hint),
        make_turn("e0", step=1, prm={"score": 0}, opd=hint),
        make_turn("e0", step=2, prm={"score": -1}, opd={"accepted": False}),
        make_turn("e0", step=3, prm={"score": 0}, opd={"accepted": False}),
    ]
    samples, stats = build_samples(turns, "combine", w_opd=2.0, w_rl=0.5)
    s = by_key(samples)
    assert set(s) == {("e0", 0), ("e0", 1), ("e0", 2)}
    assert s["e0", 0].advantages == approx([2 * 0.5 + 0.5, 2 * -1.0 + 0.5])
    assert s["e0", 1].advantages == approx([1.0, -2.0])
    assert s["e0", 2].advantages == approx([-0.5, -0.5])
    assert stats["dropped_by_reason"] == {"no_signal": 1}


def test_integrated_buckets_and_singletons():
    turns = [
        make_turn("e0", "g0", 0, outcome=1.0, prm={"votes": [1, 1, None]}),  # R = 1 + 0.5 * 1
        make_turn("e0", "g0", 1, outcome=1.0, prm={"votes": [-1]}),  # 0.5
        make_turn("e0", "g0", 2, outcome=1.0, prm={"votes": [1]}),  # 1.5, singleton bucket
        make_turn("e1", "g0", 0, outcome=-1.0, prm={"votes": [1, -1]}),  # -1
        make_turn("e1", "g0", 1, outcome=-1.0, prm={"votes": []}),  # -1
        make_turn("e2", "g0", 0, outcome=-1.0, prm={"votes": [-1]}),  # -1.5
        make_turn("e2", "g0", 1, status="infra_error", outcome=None, prm={"votes": [1]}),
        make_turn("e5", "g1", 0, outcome=1.0), make_turn("e6", "g1", 0, outcome=1.0),  # constant bucket
        make_turn("e5", "g1", 1, outcome=1.0),  # singleton in a constant pool
    ]
    samples, stats = build_samples(turns, "integrated", prm_coef=0.5)
    s = by_key(samples)
    assert set(s) == {("e0", 0), ("e1", 0), ("e2", 0), ("e0", 1), ("e1", 1), ("e0", 2)}
    std0 = math.sqrt(((1.5 + 1 / 3) ** 2 + (-1 + 1 / 3) ** 2 + (-1.5 + 1 / 3) ** 2) / 2)
    assert s["e0", 0].advantages[0] == approx((1.5 + 1 / 3) / std0)  # 1.1406
    assert s["e1", 0].advantages[0] == approx((-1 + 1 / 3) / std0)  # -0.4148
    assert s["e2", 0].advantages[0] == approx((-1.5 + 1 / 3) / std0)  # -0.7259
    assert s["e0", 1].advantages == approx([0.7071068] * 2)
    assert s["e1", 1].advantages == approx([-0.7071068] * 2)
    # singleton: z-scored against all six step rewards of g0 (mean 0, sample std sqrt(9 / 5))
    assert s["e0", 2].advantages == approx([1.5 / math.sqrt(1.8)] * 2)
    assert stats["dropped_by_reason"] == {"constant_bucket": 2, "singleton_bucket": 1}
    assert stats["infra_excluded"] == 1


def test_untrainable_turns_and_bad_mode():
    turns = [make_turn("e0", step=0, n=0, prm={"score": 1}), make_turn("e0", step=1, logprobs=[-1.0], prm={"score": 1})]
    samples, stats = build_samples(turns, "binary")
    assert samples == [] and stats["dropped_by_reason"] == {"empty_response": 1, "bad_logprobs": 1}
    with pytest.raises(ValueError, match="unknown training mode"):
        build_samples(turns, "bogus")
