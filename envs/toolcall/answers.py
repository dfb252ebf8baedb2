"""Final answers: read from the last `\\boxed{...}`, checked against the reference with math-verify."""
from __future__ import annotations

import logging
import threading

from math_verify import parse, verify

MAX_ANSWER_CHARS = 300  # longer "answers" are not worth a symbolic check (and could stall sympy)


class _NoTimeoutWarning(logging.Filter):
    """math-verify warns on every call made without its SIGALRM timeout (any worker thread);
    answers are bounded by MAX_ANSWER_CHARS instead, so the warning is only noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.grader", "math_verify.parser"):
    logging.getLogger(_name).addFilter(_NoTimeoutWarning())


def extract_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if absent."""
    best = None
    for key in ("\\boxed{", "\\fbox{"):
        i = text.rfind(key)
        if i >= 0 and (best is None or i > best[0]):
            best = (i, key)
    if best is None:
        return None
    start = best[0] + len(best[1])
    depth = 1
    for j in range(start, len(text)):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:j].strip()
    return None  # never closed


def is_equivalent(given: str, expected: str) -> bool:
    """True if `given` equals `expected` mathematically (math-verify: numbers, fractions, LaTeX)."""
    given, expected = given.strip(), str(expected).strip()
    if not given or len(given) > MAX_ANSWER_CHARS:
        return False
    if given == expected:
        return True
    # math-verify's timeouts use SIGALRM, which only the main thread may set.
    t = 5 if threading.current_thread() is threading.main_thread() else None
    gold = parse(f"${expected}$", parsing_timeout=t)
    pred = parse(f"\\boxed{{{given}}}", parsing_timeout=t)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=t))
