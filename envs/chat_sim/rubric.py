"""Rubric checks: the named, parameterised tests a persona's hidden preferences are made of.

A persona file lists rubric items; each item names a check from `CHECKS` and carries that
check's parameters. A check is a pair of functions:
  passes(text, item, ctx) -> bool   does the text meet the preference
  repair(text, item, ctx) -> str    a minimal edit that makes it pass (used by the oracle)
`ctx` holds what the task knows: "answer" (ground truth), "student_answer" (teacher persona).
Adding a check is one entry in `CHECKS`; adding a persona needs no code at all.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

BOLD = re.compile(r"\*\*[^*\n]+?\*\*|__[^_\n]+?__")
HEADER = re.compile(r"^\s{0,3}#{1,6}\s+\S", re.MULTILINE)
BULLET = re.compile(r"^\s*[-*+\u2022]\s+\S", re.MULTILINE)
NUMBERED = re.compile(r"^\s*(?:\d{1,2}[.)]|step\s*\d+\s*[:.)-])\s*\S", re.MULTILINE | re.IGNORECASE)
CONTRACTION = re.compile(r"\b\w+'(?:s|t|re|ll|ve|d|m)\b", re.IGNORECASE)
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
WORD = re.compile(r"[A-Za-z0-9']+")

DEFAULT_CASUAL = ["so", "just", "basically", "pretty", "kinda", "gonna", "yeah", "ok", "okay", "then"]
DEFAULT_FORMAL = ["therefore", "thus", "hence", "in conclusion", "furthermore", "moreover"]


@dataclasses.dataclass(frozen=True)
class RubricItem:
    """One hidden preference: a named check, its parameters and how the user phrases a failure."""

    name: str  # unique within a persona; what data["failed"] lists
    check: str  # key of CHECKS
    params: dict[str, Any]
    complaint: tuple[str, ...]  # evaluative phrasings ("this looks way too AI-written")
    directive: tuple[str, ...]  # directive phrasings ("don't use bold text")
    preference: str  # the preference in plain words (LLM user prompt, LLM judge prompt)

    def passes(self, text: str, ctx: dict[str, Any]) -> bool:
        return CHECKS[self.check][0](text, self.params, ctx)

    def repair(self, text: str, ctx: dict[str, Any]) -> str:
        return CHECKS[self.check][1](text, self.params, ctx)


def words(text: str) -> list[str]:
    return WORD.findall(text)


def _has_phrase(text: str, phrase: str) -> bool:
    """Case-insensitive whole-word match of a word or phrase."""
    return re.search(rf"(?<!\w){re.escape(phrase.lower())}(?!\w)", text.lower()) is not None


def _norm_number(s: str) -> str:
    """'1,200.00' -> '1200', '3.50' -> '3.5': numbers compare by value, not spelling."""
    s = s.replace(",", "").replace("$", "").strip()
    try:
        v = float(s)
    except ValueError:
        return s
    return str(int(v)) if v == int(v) else repr(v)


def numbers(text: str) -> list[str]:
    return [_norm_number(m) for m in NUMBER.findall(text)]


def _states_number(text: str, value: Any, where: str) -> bool:
    if value is None or str(value).strip() == "":
        return False
    found = numbers(text)
    target = _norm_number(str(value))
    if where == "last":
        return bool(found) and found[-1] == target
    return target in found


def _append(text: str, sentence: str) -> str:
    text = text.rstrip()
    return f"{text} {sentence}" if text else sentence


# ---- checks: (passes, repair) -----------------------------------------------------------
def _no_bold(text, p, ctx):
    return BOLD.search(text) is None


def _fix_bold(text, p, ctx):
    return BOLD.sub(lambda m: m.group(0)[2:-2], text)


def _no_headers(text, p, ctx):
    return HEADER.search(text) is None


def _fix_headers(text, p, ctx):
    return re.sub(r"^\s{0,3}#{1,6}\s+", "", text, flags=re.MULTILINE)


def _no_lists(text, p, ctx):
    return BULLET.search(text) is None and NUMBERED.search(text) is None


def _fix_lists(text, p, ctx):
    text = re.sub(r"^\s*[-*+\u2022]\s+", "", text, flags=re.MULTILINE)
    text = re.sub(r"^\s*(?:\d{1,2}[.)]|step\s*\d+\s*[:.)-])\s*", "", text, flags=re.MULTILINE | re.IGNORECASE)
    return text


def _none_of(text, p, ctx):
    return not any(_has_phrase(text, ph) for ph in p.get("phrases", []))


def _fix_none_of(text, p, ctx):
    for ph in p.get("phrases", []):
        text = re.sub(rf"(?<!\w){re.escape(ph)}(?!\w)\s*:?\s*", "", text, flags=re.IGNORECASE)
    return text


def _any_of(text, p, ctx):
    return any(_has_phrase(text, w) for w in p.get("words", []))


def _fix_any_of(text, p, ctx):
    ws = p.get("words", [])
    return _append(text, p.get("repair_sentence") or f"{ws[0].capitalize()}!") if ws else text


def _min_words(text, p, ctx):
    return len(words(text)) >= int(p.get("words", 0))


def _fix_min_words(text, p, ctx):
    filler = p.get("repair_sentence") or "I went through each part carefully so you can follow along."
    while len(words(text)) < int(p.get("words", 0)):
        text = _append(text, filler)
    return text


def _max_words(text, p, ctx):
    return len(words(text)) <= int(p.get("words", 10**9))


def _fix_max_words(text, p, ctx):
    found, n = list(WORD.finditer(text)), max(0, int(p.get("words", 10**9)))
    if len(found) <= n:
        return text
    return text[: found[n - 1].end()] if n else ""


def _casual(text, p, ctx):
    markers = len(CONTRACTION.findall(text)) + sum(
        _has_phrase(text, w) for w in p.get("casual_words", DEFAULT_CASUAL))
    formal = any(_has_phrase(text, w) for w in p.get("formal_words", DEFAULT_FORMAL))
    return markers >= int(p.get("min_markers", 2)) and not formal


def _fix_casual(text, p, ctx):
    text = _fix_none_of(text, {"phrases": p.get("formal_words", DEFAULT_FORMAL)}, ctx)
    while not _casual(text, p, ctx):
        text = _append(text, "That's pretty much it, it's not that bad once you see it.")
    return text


def _correct(text, p, ctx):
    return _states_number(text, ctx.get("answer"), p.get("where", "anywhere"))


def _fix_correct(text, p, ctx):
    return _append(text, p.get("repair_sentence", "so the answer is {answer}.").format(**ctx))


def _mentions_student(text, p, ctx):
    return _states_number(text, ctx.get("student_answer"), "anywhere")


def _fix_mentions_student(text, p, ctx):
    return _append(text, "You wrote {student_answer}.".format(**ctx))


def _no_preamble(text, p, ctx):
    head = text.lstrip().lower()
    return not any(head.startswith(ph.lower()) for ph in p.get("phrases", []))


def _fix_preamble(text, p, ctx):
    while not _no_preamble(text, p, ctx):
        first, _, rest = text.lstrip().partition("\n")
        cut = re.split(r"(?<=[.:!])\s", first, maxsplit=1)
        text = (cut[1] if len(cut) > 1 else "") + ("\n" + rest if rest else "")
    return text


Check = Callable[[str, dict, dict], Any]
CHECKS: dict[str, tuple[Check, Check]] = {
    "no_markdown_bold": (_no_bold, _fix_bold),
    "no_headers": (_no_headers, _fix_headers),
    "no_lists": (_no_lists, _fix_lists),
    "must_not_include_any": (_none_of, _fix_none_of),
    "must_include_any": (_any_of, _fix_any_of),
    "min_words": (_min_words, _fix_min_words),
    "max_words": (_max_words, _fix_max_words),
    "casual_voice": (_casual, _fix_casual),
    "must_be_correct": (_correct, _fix_correct),
    "mentions_student_answer": (_mentions_student, _fix_mentions_student),
    "no_preamble": (_no_preamble, _fix_preamble),
}


def failed_items(items: list[RubricItem], text: str, ctx: dict[str, Any]) -> list[RubricItem]:
    return [it for it in items if not it.passes(text, ctx)]


def quarter_score(items: list[RubricItem], text: str, ctx: dict[str, Any]) -> float:
    """Fraction of items passed, rounded half-up to the nearest quarter: {0, .25, .5, .75, 1}.

    The paper's judge picks one of these five values; rounding the pass fraction keeps the rule
    score on the same scale (e.g. 5 of 7 items = 0.714 -> 0.75; 1 of 2 -> 0.5)."""
    if not items:
        return 1.0
    frac = 1.0 - len(failed_items(items, text, ctx)) / len(items)
    return int(frac * 4 + 0.5) / 4
