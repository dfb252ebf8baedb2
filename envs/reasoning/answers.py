"""The final answer in a reply: the last answer marker wins, and nothing after it counts.

Markers: `Answer: X` (any case, markdown bold allowed), the phrase small models use instead,
`The (final) answer (to ...) is X` ("answer", then "is" within the same clause), and
`\\boxed{X}`. The reply's last answer marker gives the rest of its line (or the next non-empty
line when the marker ends its line), unless a `\\boxed{}` follows that marker: then the last
such box wins. With no answer marker the last `\\boxed{}` is the answer. Only that string
reaches the dataset's verifier, so nothing else in the reply (a fake verdict, other guesses)
can make it count as correct.
"""
from __future__ import annotations

import re

from envs.toolcall.answers import extract_boxed

_MARKER = re.compile(r"\banswer\b(?:\s*[:：]|[^\n.:]{0,60}?\bis\b:?)", re.IGNORECASE)
_DECOR = " \t*`$"  # markdown and math decoration models put around an answer


def extract_answer(text: str) -> str | None:
    """The reply's final answer (see the module docstring); None when it gives none."""
    last = None
    for last in _MARKER.finditer(text):
        pass
    if last is None:
        return extract_boxed(text) or None
    rest = text[last.end():]
    boxed = extract_boxed(rest)
    if boxed:
        return boxed
    for line in rest.lstrip(_DECOR).splitlines():
        line = line.strip(_DECOR)
        if line:
            return line.removesuffix(".").strip(_DECOR) or None
    return None


def format_answer(answer: str) -> str:
    """A reply that `extract_answer` reads back as `answer` exactly (the oracle's reply)."""
    if "\n" in answer or answer != answer.strip(_DECOR) or answer.endswith("."):
        return f"\\boxed{{{answer}}}"
    return f"Answer: {answer}"
