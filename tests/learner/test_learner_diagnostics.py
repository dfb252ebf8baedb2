"""Signal-yield diagnostics on constructed batches (learner/diagnostics.py)."""
from __future__ import annotations

import pytest

from learner.advantages import build_samples
from learner.diagnostics import hint_fate, summary
from learner.loop import step_summary
from tests.learner_turns import make_turn, opd_signal


def test_combine_counts_votes_hints_flat_groups_and_gradient_tokens():
    ok_hint = {"votes": [1, 1], "hints": ["use ls -la to see hidden files"] * 2, "accepted": True,
               "teacher_logprobs": [-0.5, -0.5]}
    turns = [
        make_turn("e0", "g0", 0, n=2, prm={"votes": [1, 1, None], "score": 1}, opd=ok_hint),
        make_turn("e1", "g1", 0, n=3, prm={"votes": [0, 0, -1], "score": 0}, opd={"votes": [-1, None], "accepted": False}),
        make_turn("e2", "g2", 0, n=5, prm={"votes": [0, 0, 0], "score": 0}, opd={"votes": [1], "hints": ["ok"], "accepted": False}),
        make_turn("e3", "g2", 0, n=4, status="infra_error"),
    ]
    _, stats = build_samples(turns, "combine")
    sig = stats["signal"]
    assert sig["prm_votes"] == {"+1": 2, "0": 5, "-1": 1, "invalid": 1}
    assert sig["hints_accepted"] == 1 and sig["hints_dropped"] == {"no_positive_vote": 1, "hint_under_11_chars": 1}
    # only e0 carries gradient: A = (teacher - old) + r = 0.5 + 1 on its 2 tokens, of 2+3+5+4 response tokens
    assert sig["gradient_token_share"] == pytest.approx(2 / 14)
    assert sig["groups"] == 3 and sig["zero_advantage_group_share"] == pytest.approx(2 / 3)
    assert "why" not in sig
    line = summary(sig)
    assert line == "signal: grad tokens 14%, flat groups 67%, votes +2/0:5/-1/inv 1, hints 1 ok, 2 dropped"


def test_a_step_that_cannot_learn_says_why():
    # the Quickstart's old failure: every turn invalid, every outcome -1, so every group is flat
    turns = [make_turn(f"e{i}", f"g{i // 2}", 0, outcome=-1.0, status="invalid_action") for i in range(4)]
    _, stats = build_samples(turns, "outcome")
    sig = stats["signal"]
    assert sig["gradient_token_share"] == 0.0 and sig["zero_advantage_group_share"] == 1.0
    assert sig["why"] == ("4/4 turns invalid_action; every episode of a task group got the same outcome (all -1): 4 turns")
    row = {"episodes": 4, "signal": sig}
    assert "NO LEARNING SIGNAL: 4/4 turns invalid_action" in step_summary(row)


def test_no_signal_from_zero_votes_and_infra():
    turns = [make_turn("e0", "g0", 0, prm={"votes": [0, None, 0], "score": 0})]
    _, stats = build_samples(turns, "binary")  # kept with advantage 0: counts, moves nothing
    assert "PRM votes all 0 or invalid (2 zero, 1 invalid)" in stats["signal"]["why"]
    _, stats = build_samples([make_turn(status="timeout")], "binary")
    assert stats["signal"]["why"] == "all 1 turns failed in the infrastructure (infra_error/timeout)"


def test_hint_fates():
    assert hint_fate(opd_signal(accepted=True)) == "accepted"
    assert hint_fate(opd_signal(error="teacher: TimeoutError: x")) == "teacher_error"
    assert hint_fate(opd_signal(votes=[])) == "no_votes"
    assert hint_fate(opd_signal(votes=[None, None])) == "invalid_votes"
