"""Judge-output parsing: boxed scores, hints, majority votes, hint selection."""
from __future__ import annotations

import collections

from hypothesis import given
from hypothesis import strategies as st

from learner.parsing import HINT_VALUES, PRM_VALUES, majority_vote, mean_vote, parse_boxed, parse_hint, select_hint


def test_boxed_valid_values():
    assert parse_boxed("reasoning... \\boxed{1}") == 1
    assert parse_boxed("\\boxed{-1}") == -1
    assert parse_boxed("\\boxed{0}") == 0
    assert parse_boxed("\\boxed{ +1 }") == 1


def test_boxed_last_box_counts():
    assert parse_boxed("first \\boxed{1} then on reflection \\boxed{-1}") == -1
    assert parse_boxed("\\boxed{-1} ... final: \\boxed{0}") == 0


def test_boxed_invalid_is_none():
    assert parse_boxed("no box at all") is None
    assert parse_boxed("") is None
    assert parse_boxed(None) is None
    assert parse_boxed("\\boxed{2}") is None
    assert parse_boxed("\\boxed{yes}") is None
    assert parse_boxed("\\boxed{1} but then \\boxed{maybe}") is None  # the last box decides
    assert parse_boxed("\\boxed{0}", HINT_VALUES) is None  # hint judges only answer +-1
    assert parse_boxed("boxed{1}") is None


def test_hint_parsing():
    assert parse_hint("\\boxed{1} [HINT_START] use ls -la [HINT_END]") == "use ls -la"
    assert parse_hint("[HINT_START]a[HINT_END] [HINT_START]\nsecond\nline\n[HINT_END]") == "second\nline"
    assert parse_hint("[HINT_START] never closed") == ""
    assert parse_hint(None) == ""


def test_majority():
    assert majority_vote([1, 1, -1]) == 1
    assert majority_vote([1, -1]) == 0  # tie
    assert majority_vote([1, -1, 0]) == 0  # three-way tie
    assert majority_vote([None, None]) == 0  # no valid vote
    assert majority_vote([]) == 0
    assert majority_vote([None, -1]) == -1  # invalid votes are dropped, not counted as 0
    assert majority_vote([0, 0, 1]) == 0


def test_mean_vote():
    assert mean_vote([1, -1, 1, None]) == 1 / 3
    assert mean_vote([None]) == 0.0


def test_select_hint():
    long_a = "run the tests with -x first"
    long_b = "run pytest -x tests/test_io.py before editing"
    assert select_hint([(1, long_a), (1, long_b), (-1, long_b + " more")]) == (long_b, True)
    assert select_hint([(1, "too short"), (1, "exactly10c")]) == ("", False)  # length must exceed 10
    assert select_hint([(1, "  eleven chars  ")]) == ("eleven chars", True)
    assert select_hint([(None, long_a), (-1, long_a)]) == ("", False)
    assert select_hint([]) == ("", False)


# ---- property tests ------------------------------------------------------------------------
noise = st.text(alphabet=st.characters(blacklist_characters="{}\\"), max_size=40)


@given(st.lists(st.tuples(noise, st.integers(-5, 5)), min_size=1, max_size=5), noise)
def test_boxed_property_last_valid_box(parts, tail):
    text = "".join(f"{pre}\\boxed{{{v}}}" for pre, v in parts) + tail
    last = parts[-1][1]
    assert parse_boxed(text) == (last if last in PRM_VALUES else None)


@given(st.text(max_size=200))
def test_boxed_property_never_raises(text):
    assert parse_boxed(text) in (None, -1, 0, 1)
    assert parse_boxed(text, HINT_VALUES) in (None, -1, 1)
    assert isinstance(parse_hint(text), str)


@given(st.lists(st.sampled_from([-1, 0, 1, None]), max_size=9))
def test_majority_property(votes):
    result = majority_vote(votes)
    counts = collections.Counter(v for v in votes if v is not None)
    if not counts:
        assert result == 0
        return
    top = max(counts.values())
    winners = [v for v, c in counts.items() if c == top]
    assert result == (winners[0] if len(winners) == 1 else 0)


@given(st.lists(st.tuples(st.sampled_from([-1, 1, None]), st.text(max_size=30)), max_size=6))
def test_select_hint_property(votes):
    hint, accepted = select_hint(votes)
    eligible = [h.strip() for s, h in votes if s == 1 and len(h.strip()) > 10]
    assert accepted == bool(eligible)
    if accepted:
        assert hint in eligible and len(hint) == max(len(h) for h in eligible)
    else:
        assert hint == ""


@given(st.text(alphabet=st.characters(blacklist_characters="[]"), max_size=60))
def test_hint_roundtrip_property(hint):
    text = f"\\boxed{{1}}\n[HINT_START]{hint}[HINT_END]"
    assert parse_hint(text) == hint.strip()
    assert parse_boxed(text, HINT_VALUES) == 1
