"""Shell output as a terminal shows it, in escaped HTML: a carriage return rewrites its line from
the start (progress bars), a backspace steps back one cell, SGR colour codes colour the text,
and every other escape sequence is dropped."""
from __future__ import annotations

import html
import re

_ESCAPE = re.compile(r"\x1b\[([0-9;?]*)([@-~])|\x1b[@-_]")
_COLOURS = ("#555", "#e05252", "#5fba5f", "#d7b74a", "#5c8fe0", "#c16fd6", "#4fbfbf", "#ddd")


def _overstrike(line: str) -> str:
    """A line after \\r and \\b have moved the cursor over it."""
    cells: list[str] = []
    at = 0
    for ch in line:
        if ch == "\r":
            at = 0
        elif ch == "\b":
            at = max(0, at - 1)
        else:
            if at < len(cells):
                cells[at] = ch
            else:
                cells.append(ch)
            at += 1
    return "".join(cells)


def _style(params: str, state: dict[str, str]) -> None:
    codes = [int(c) for c in params.split(";") if c.isdigit()] or [0]
    for c in codes:
        if c == 0:
            state.clear()
        elif c == 1:
            state["font-weight"] = "bold"
        elif 30 <= c <= 37 or 90 <= c <= 97:
            state["color"] = _COLOURS[c % 10]
        elif 40 <= c <= 47:
            state["background"] = _COLOURS[c % 10]
        elif c == 39:
            state.pop("color", None)
        elif c == 49:
            state.pop("background", None)


def to_html(text: str) -> str:
    """Escaped HTML of `text` (for a <pre>) with colours as <span style=...>."""
    out: list[str] = []
    state: dict[str, str] = {}
    for n, line in enumerate(text.split("\n")):
        if n:
            out.append("\n")
        if "\r" in line or "\b" in line:  # cursor moves: drop the colours of this line
            out.append(html.escape(_overstrike(_ESCAPE.sub("", line))))
            continue
        at = 0
        for m in _ESCAPE.finditer(line):
            out.append(_span(line[at:m.start()], state))
            if m.group(2) == "m":
                _style(m.group(1), state)
            at = m.end()
        out.append(_span(line[at:], state))
    return "".join(out)


def _span(text: str, state: dict[str, str]) -> str:
    if not text:
        return ""
    if not state:
        return html.escape(text)
    style = ";".join(f"{k}:{v}" for k, v in state.items())
    return f'<span style="{style}">{html.escape(text)}</span>'
