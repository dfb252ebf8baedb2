"""Secrets and personal data in live users' turns: found, redacted in the records, kept out of the loss.

Kinds: `email`, `phone` (Google's libphonenumber via `phonenumbers`: real numbering plans, so a
card number or an order id is not taken for a phone; international `+...` numbers anywhere, national
ones in PHONE_REGION), `card` (13-19 digits, spaces or dashes between, Luhn-valid), `secret` (API
keys by their providers' formats, JWTs, PEM private keys, `Bearer` tokens, and values assigned to
key/secret/token/password names).

Why not a larger detector: Presidio needs a spaCy model at run time (nothing can be downloaded
here, and it is hundreds of MB); detect-secrets reports lines of files, not spans of text, and
its entropy plugins flag every hash and UUID in a chat. The regexes below are the cheap, exact
part of what those libraries do; names, addresses and other free-text PII are not detected.

A redacted text keeps its shape: each finding becomes `[REDACTED:<kind>]`. The token ids of a turn
stay exact (the sampler's); `private_tokens` names the response tokens that carry a finding so
the learner's loss mask can drop them.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Iterable

import phonenumbers

PHONE_REGION = "US"  # numbers written without a country code are read as this region's

_SECRET_PATTERNS = [
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\bsk-[A-Za-z0-9_-]{16,}",                      # OpenAI, Anthropic (sk-ant-...), our own sk-run-
    r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",                # AWS access key ids
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",               # Slack
    r"\bAIza[0-9A-Za-z_-]{35}",                      # Google
    r"\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",       # Stripe
    r"\bglpat-[0-9A-Za-z_-]{20,}",                   # GitLab
    r"\bhf_[A-Za-z0-9]{30,}",                        # Hugging Face
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
]
_SECRET = re.compile("|".join(f"(?:{p})" for p in _SECRET_PATTERNS))
# the value only: "password: hunter22" keeps "password: "
_ASSIGNED = re.compile(r"(?i)(?:\b(?:api[_-]?key|secret|token|passw(?:or)?d|pwd)\b[\"']?\s*[:=]\s*[\"']?|\bbearer\s+)"
                       r"(?P<value>[^\s\"',;]{8,})")
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")


@dataclasses.dataclass(frozen=True)
class Finding:
    start: int
    end: int
    kind: str


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def find_private(text: str) -> list[Finding]:
    """Secrets and personal data in `text`, sorted and without overlaps."""
    found = [Finding(m.start(), m.end(), "secret") for m in _SECRET.finditer(text)]
    found += [Finding(m.start("value"), m.end("value"), "secret") for m in _ASSIGNED.finditer(text)]
    found += [Finding(m.start(), m.end(), "email") for m in _EMAIL.finditer(text)]
    found += [Finding(m.start(), m.end(), "card") for m in _CARD.finditer(text)
              if _luhn(re.sub(r"\D", "", m.group()))]
    if any(ch.isdigit() for ch in text):
        found += [Finding(m.start, m.end, "phone")
                  for m in phonenumbers.PhoneNumberMatcher(text, PHONE_REGION, leniency=phonenumbers.Leniency.VALID)]
    merged: list[Finding] = []
    for f in sorted(found, key=lambda f: (f.start, -f.end)):
        if merged and f.start < merged[-1].end:  # overlapping findings are one
            last = merged[-1]
            merged[-1] = Finding(last.start, max(last.end, f.end), last.kind)
        else:
            merged.append(f)
    return merged


def redact(text: str) -> tuple[str, set[str]]:
    """`text` with every finding replaced by [REDACTED:<kind>], and the private values found."""
    findings = find_private(text)
    if not findings:
        return text, set()
    out, at = [], 0
    for f in findings:
        out += [text[at:f.start], f"[REDACTED:{f.kind}]"]
        at = f.end
    out.append(text[at:])
    return "".join(out), {text[f.start:f.end] for f in findings}


def redact_messages(messages: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[str]]:
    """Messages with their (text) content redacted, and every private value found in them."""
    out, values = [], set()
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            content, found = redact(content)
            values |= found
            m = {**m, "content": content}
        out.append(m)
    return out, values


def private_tokens(ids: list[int], decode: Callable[[list[int]], str], values: set[str]) -> list[int]:
    """Indices of the tokens of `ids` that carry a private value: a finding in their own text, or
    any of `values` (found in the request) repeated. A token is masked when any of its characters
    (a partly decoded multi-byte character included) lies inside one."""
    text = decode(ids)
    spans = [(f.start, f.end) for f in find_private(text)]
    for v in values:
        spans += [(m.start(), m.end()) for m in re.finditer(re.escape(v), text)]
    if not spans:
        return []
    ends = [len(decode(ids[:i + 1])) for i in range(len(ids))]  # prefix lengths: token i ends at ends[i]
    masked = []
    for i, end in enumerate(ends):
        start = ends[i - 1] if i else 0
        if any(end > a and start < b for a, b in spans):
            masked.append(i)
    return masked
