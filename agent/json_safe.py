"""Plain JSON values that can always be written: the one converter behind every JSONL record
(turns in the run log and the proxy's records, metrics rows)."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

MAX_DEPTH = 64


def json_safe(x: Any, escaped: list[str] | None = None, _depth: int = 0) -> Any:
    """`x` as plain JSON values: non-finite floats become null, numpy / torch scalars Python
    numbers, dataclasses dicts of their fields, tuples lists, keys strings. What JSON or UTF-8
    cannot hold is escaped, never raised on, and a word on it goes to `escaped`: a lone surrogate
    becomes its \\udXXXX escape, any other object its repr, nesting (so any cycle) is cut at
    MAX_DEPTH levels."""
    if isinstance(x, str):
        try:
            x.encode("utf-8")
            return x
        except UnicodeEncodeError:
            _note(escaped, "text UTF-8 cannot encode")
            return x.encode("utf-8", "backslashreplace").decode("utf-8")
    if x is None or isinstance(x, (bool, int)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if _depth >= MAX_DEPTH:
        _note(escaped, "nested too deeply")
        return "<nested too deeply>"
    if isinstance(x, dict):
        return {json_safe(k if isinstance(k, str) else str(k), escaped, _depth + 1): json_safe(v, escaped, _depth + 1)
                for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v, escaped, _depth + 1) for v in x]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return json_safe({f.name: getattr(x, f.name) for f in dataclasses.fields(x)}, escaped, _depth)
    item = getattr(x, "item", None)
    if callable(item):  # a numpy or torch scalar
        try:
            return json_safe(item(), escaped, _depth + 1)
        except (TypeError, ValueError):  # an array of more than one value
            pass
    _note(escaped, f"a {type(x).__name__} written as its repr")
    return json_safe(repr(x), escaped, _depth + 1)


def _note(escaped: list[str] | None, what: str) -> None:
    if escaped is not None and what not in escaped:
        escaped.append(what)
