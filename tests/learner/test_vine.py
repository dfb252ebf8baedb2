"""mode=vine on hand-built episode trees, and the judge audit on cases with a known correlation."""
from __future__ import annotations

import math

import pytest

from agent.turn import PRMScore, Turn
from envs.base import NextState
from learner.advantages import build_samples
from learner.vine import judge_audit, pearson, turn_values


def _turn(episode: str, step: int, outcome: float | None, votes: list[int | None] | None = None,
          status: str = "ok", tree: str = "e0") -> Turn:
    branch = episode.split("/")[1] if "/" in episode else ""
    start = int(branch[1:].split(".")[0]) if branch else 0
    parent = f"{episode}/{step - 1}" if step > start else (f"{tree}/{step - 1}" if step else None)
    return Turn(episode_id=episode, task_id="t", group_id="g0", step_index=step, policy_version=0, prompt_ids=[1, 2],
                response_ids=[3, 4], rollout_logprobs=[-0.5, -0.5], action="a", next_state=NextState("user", "x", "user_reply"),
                status=status, outcome=outcome, prm=PRMScore(votes, 0, []) if votes is not None else None,
                tree_id=tree, branch_id=branch, parent_turn=parent)


def tree(votes: dict[str, list[int | None]] | None = None) -> list[Turn]:
    """Trunk e0 (steps 0-2, outcome +1); before step 0 one continuation b0.0 (steps 0-1, +1);
    before step 1 three: b1.0 (steps 1-2, -1), b1.1 (step 1, -1) and b1.2 (cut by infrastructure at
    step 1: no outcome)."""
    v = votes or {}
    return [
        _turn("e0", 0, 1.0, v.get("e0/0")), _turn("e0", 1, 1.0, v.get("e0/1")), _turn("e0", 2, 1.0),
        _turn("e0/b0.0", 0, 1.0, v.get("e0/b0.0/0")), _turn("e0/b0.0", 1, 1.0),
        _turn("e0/b1.0", 1, -1.0, v.get("e0/b1.0/1")), _turn("e0/b1.0", 2, -1.0),
        _turn("e0/b1.1", 1, -1.0, v.get("e0/b1.1/1")),
        _turn("e0/b1.2", 1, None, [1], status="infra_error"),
    ]


def test_values_are_the_mean_outcome_of_the_paths_through_each_turn():
    values = turn_values(tree())
    assert values["e0/0"] == pytest.approx(-1 / 3)  # trunk +1, b1.0 -1, b1.1 -1 (b1.2 has no outcome)
    assert values["e0/1"] == 1.0 and values["e0/2"] == 1.0  # no continuation forked after step 1
    assert values["e0/b0.0/0"] == 1.0 and values["e0/b1.0/1"] == -1.0 and values["e0/b1.1/1"] == -1.0
    assert "e0/b1.2/1" not in values


def test_vine_advantages_match_the_hand_computed_tree():
    samples, stats = build_samples(tree(), "vine")
    adv = {f"{s.meta['episode_id']}/{s.meta['step_index']}": s.advantages[0] for s in samples}
    # step 0: values -1/3 (trunk) and 1 (b0.0): mean 1/3, sample std (4/3)/sqrt(2)
    assert adv["e0/0"] == pytest.approx(-1 / math.sqrt(2)) and adv["e0/b0.0/0"] == pytest.approx(1 / math.sqrt(2))
    # step 1: values 1 (trunk), -1, -1 (b1.0, b1.1); b1.2 is infra: out of the batch and the statistics
    # mean -1/3, sample std sqrt(((4/3)^2 + 2 (2/3)^2) / 2) = 2/sqrt(3)
    s = 2 / math.sqrt(3)
    assert adv["e0/1"] == pytest.approx((4 / 3) / s)
    assert adv["e0/b1.0/1"] == pytest.approx(-(2 / 3) / s) and adv["e0/b1.1/1"] == pytest.approx(-(2 / 3) / s)
    assert set(adv) == {"e0/0", "e0/b0.0/0", "e0/1", "e0/b1.0/1", "e0/b1.1/1"}
    assert all(len(set(s.advantages)) == 1 and s.meta["mode"] == "vine" for s in samples)  # broadcast over tokens
    # no sibling: e0/2, b0.0's step 1, b1.0's step 2; b1.2 is infra (excluded before anything)
    assert stats["dropped_by_reason"] == {"unbranched": 3}
    assert stats["infra_excluded"] == 1


def test_a_branch_point_whose_paths_all_end_alike_drops_out():
    turns = [_turn("e0", 0, 1.0), _turn("e0/b0.0", 0, 1.0), _turn("e0/b0.1", 0, None, status="timeout")]
    samples, stats = build_samples(turns, "vine")
    assert samples == [] and stats["dropped_by_reason"] == {"constant_state": 2}


def test_pearson_on_known_cases():
    assert pearson([1, 0, -1, 0], [1, 1, -1, -1]) == (pytest.approx(1 / math.sqrt(2)), None)
    assert pearson([0.0, 1.0, 2.0], [5.0, 3.0, 1.0]) == (pytest.approx(-1.0), None)
    assert pearson([1, 1, 1], [0, 1, 2]) == (None, "constant_prm")
    assert pearson([0, 1], [2, 2]) == (None, "constant_value")
    assert pearson([1], [1]) == (None, "fewer_than_2_turns")


def test_judge_audit_correlates_each_branched_turns_mean_vote_with_its_value():
    # mean votes equal to the values (-1/3, 1 | 1, -1, -1): r = 1 over the five branched turns
    agree = {"e0/0": [1, -1, -1], "e0/b0.0/0": [1], "e0/1": [1, 1, None], "e0/b1.0/1": [-1], "e0/b1.1/1": [-1, None]}
    assert judge_audit(tree(agree)) == {"pearson": pytest.approx(1.0), "turns": 5, "undefined": None}
    flipped = {k: [None if v is None else -v for v in vs] for k, vs in agree.items()}
    assert judge_audit(tree(flipped))["pearson"] == pytest.approx(-1.0)
    # a judge that says +1 everywhere: no variance, no correlation to speak of
    assert judge_audit(tree({k: [1] for k in agree})) == {"pearson": None, "turns": 5, "undefined": "constant_prm"}
    # turns without valid votes are left out
    assert judge_audit(tree({"e0/0": [None], "e0/1": [1]}))["turns"] == 1
