"""Parsing judge outputs into votes, and votes into one signal (docs/architecture.md, "Next-state scorer").

A PRM judge ends its answer with `\\boxed{1}`, `\\boxed{0}` or `\\boxed{-1}`; a hint judge with
`\\boxed{1}` or `\\boxed{-1}` and, for +1, a hint between [HINT_START] and [HINT_END]. The *last*
box counts (judges reason first and may quote boxes on the way); a last box whose content is not
an allowed value makes the vote invalid (None), as does a text with no box at all.
"""
from __future__ import annotations

import collections
import re
from typing import Iterable, Sequence

PRM_VALUES = frozenset({-1, 0, 1})
HINT_VALUES = frozenset({-1, 1})
#: a hint must be longer than this (characters, stripped) to be used (the paper's threshold)
MIN_HINT_CHARS = 10

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_INT = re.compile(r"[-+]?\d+")
_HINT = re.compile(r"\[HINT_START\](.*?)\[HINT_END\]", re.DOTALL)


def parse_boxed(text: str | None, allowed: frozenset[int] = PRM_VALUES) -> int | None:
    """The value of the last `\\boxed{...}` in `text` if it is an allowed integer, else None."""
    if not text:
        return None
    boxes = _BOXED.findall(text)
    if not boxes:
        return None
    inner = boxes[-1].strip()
    if not _INT.fullmatch(inner):
        return None
    value = int(inner)
    return value if value in allowed else None


def parse_hint(text: str | None) -> str:
    """The last [HINT_START]...[HINT_END] block, stripped; "" when there is none."""
    if not text:
        return ""
    blocks = _HINT.findall(text)
    return blocks[-1].strip() if blocks else ""


def majority_vote(votes: Iterable[int | None]) -> int:
    """The most common valid vote; 0 when there is no valid vote or the top count is tied."""
    counts = collections.Counter(v for v in votes if v is not None)
    if not counts:
        return 0
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        return 0
    return top


def mean_vote(votes: Iterable[int | None]) -> float:
    """Mean of the valid votes (the integrated reward's process term); 0.0 when none is valid."""
    valid = [v for v in votes if v is not None]
    return sum(valid) / len(valid) if valid else 0.0


def select_hint(votes: Sequence[tuple[int | None, str]]) -> tuple[str, bool]:
    """(hint, accepted) from (score, hint) votes: among +1 votes whose hint is longer than
    MIN_HINT_CHARS, the longest hint wins (the first of equally long ones); none -> ("", False)."""
    best = ""
    for score, hint in votes:
        hint = (hint or "").strip()
        if score == 1 and len(hint) > MIN_HINT_CHARS and len(hint) > len(best):
            best = hint
    return best, bool(best)
