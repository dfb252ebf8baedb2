"""One episode as a static HTML page: per turn the new part of the prompt, the response coloured
token by token, the next state, the status, the PRM votes, the OPD hint and the outcome.

Everything from the run is agent-produced text and goes through html.escape (or
terminal.to_html, which escapes too); the page has no script, so nothing in it can run.
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from agent.turn import OPDSignal, Turn, turn_record
from experiments.view import terminal
from experiments.view.records import Episode
from experiments.view.tokens import RunTokenizer, colour, token_pieces, token_values
from learner.diagnostics import hint_fate

_CHATML = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>\n?|$)", re.S)
_SHELL_KINDS = ("shell", "tests")


@dataclass
class RunInfo:
    key: str  # "r0", "r1", ...: the folder of its pages
    label: str
    env: str
    mode: str
    tokenizer: Any  # None: show the recorded action text, uncoloured


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any) -> str:
    return f"{x:+.4g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else esc(x)


def messages_html(text: str) -> str:
    """A rendered prompt part: ChatML blocks as one box per message, anything else verbatim."""
    blocks = list(_CHATML.finditer(text))
    if not blocks:
        return f'<pre class="msg">{esc(text)}</pre>'
    out, at = [], 0
    for m in blocks:
        if text[at:m.start()].strip():
            out.append(f'<pre class="msg">{esc(text[at:m.start()])}</pre>')
        role, body = m.group(1), m.group(2)
        out.append(f'<div class="msg role-{esc(role)}"><div class="role">{esc(role)}</div><pre>{esc(body)}</pre></div>')
        at = m.end()
    if text[at:].strip():
        out.append(f'<pre class="msg">{esc(text[at:])}</pre>')
    return "".join(out)


def response_html(turn: dict[str, Any], run: RunInfo, scale: float, values: list[float] | None, what: str) -> str:
    """The response's tokens as spans: background by value, the values in the title (hover)."""
    ids = turn.get("response_ids") or []
    if run.tokenizer is None or not ids:
        return f'<pre class="resp">{esc(turn.get("action", ""))}</pre>'
    pieces = token_pieces(run.tokenizer, ids)
    logprobs = turn.get("rollout_logprobs") or []
    teacher = (turn.get("opd") or {}).get("teacher_logprobs") or []
    spans, start = [], 0
    for i, piece in enumerate(pieces):
        if not piece and i + 1 < len(pieces):
            continue  # a partial character: the token completing it carries the span
        idx = range(start, i + 1)
        tips = []
        for j in idx:
            tip = f"token {j} id {ids[j]}"
            if values is not None:
                tip += f"  value {values[j]:+.4f}"
            if j < len(teacher):
                tip += f"  teacher {teacher[j]:.4f}"
            if j < len(logprobs):
                tip += f"  student {logprobs[j]:.4f}"
            tips.append(tip)
        attrs = f'title="{esc(chr(10).join(tips))}" data-t="{start}-{i}"'
        if values is not None:
            v = sum(values[j] for j in idx) / len(idx)
            attrs += f' data-a="{v:.6g}" style="background:{colour(v, scale)}"'
        spans.append(f"<span {attrs}>{esc(piece)}</span>")
        start = i + 1
    return f'<pre class="resp tokens" data-scale="{scale:.6g}" data-what="{esc(what)}">{"".join(spans)}</pre>'


def next_state_html(ns: dict[str, Any], image: Callable[[str], str | None]) -> str:
    kind, data = ns.get("kind", ""), dict(ns.get("data") or {})
    content = str(ns.get("content", ""))
    parts = [f'<div class="meta">kind <b>{esc(kind)}</b>, role {esc(ns.get("role", ""))}</div>']
    shot = data.get("screenshot")
    if isinstance(shot, str) and shot:
        src = image(shot)
        parts.append(f'<img class="shot" src="{esc(src)}" alt="screenshot">' if src else
                     f'<div class="meta">screenshot {esc(shot)} not found</div>')
    if kind in _SHELL_KINDS:
        parts.append(f'<pre class="term">{terminal.to_html(content)}</pre>')
    else:
        parts.append(f'<pre class="ns">{esc(content)}</pre>')
    if data:
        parts.append(f'<details><summary>data</summary><pre class="data">{esc(json.dumps(data, indent=1, ensure_ascii=False))}</pre></details>')
    return "".join(parts)


def prm_html(prm: dict[str, Any]) -> str:
    if not prm:
        return '<span class="meta">none (the mode uses no PRM votes)</span>'
    votes, texts = prm.get("votes") or [], prm.get("texts") or []
    rows = "".join(f"<li><b>{_num(v) if v is not None else 'invalid'}</b> <pre>{esc(t)}</pre></li>"
                   for v, t in zip(votes, texts + [""] * (len(votes) - len(texts))))
    err = f'<div class="bad">{esc(prm["error"])}</div>' if prm.get("error") else ""
    return f"score <b>{_num(prm.get('score'))}</b>{err}<ol>{rows}</ol>"


def opd_html(opd: dict[str, Any]) -> str:
    if not opd:
        return '<span class="meta">none (the mode uses no hints)</span>'
    fate = hint_fate(OPDSignal(**opd))  # the record as written: the learner's reading of it
    head = f'<b class="{"good" if fate == "accepted" else "bad"}">{esc(fate.replace("_", " "))}</b>'
    hint = f'<pre class="hint">{esc(opd["hint"])}</pre>' if opd.get("hint") else ""
    err = f'<div class="bad">{esc(opd["error"])}</div>' if opd.get("error") else ""
    votes = opd.get("votes") or []
    texts = (opd.get("texts") or []) + [""] * len(votes)
    rows = "".join(f"<li><b>{_num(v) if v is not None else 'invalid'}</b> <pre>{esc(t)}</pre></li>" for v, t in zip(votes, texts))
    return f"{head}{err}{hint}<ol>{rows}</ol>"


def _prompt_part(turn: dict[str, Any], prev: dict[str, Any] | None, tok: Any) -> tuple[str, bool]:
    """(decoded new prompt tokens, whether this is the whole prompt)."""
    ids = turn.get("prompt_ids") or []
    if prev is not None:
        before = (prev.get("prompt_ids") or []) + (prev.get("response_ids") or [])
        if before and ids[:len(before)] == before:
            return tok.decode(ids[len(before):], skip_special_tokens=False), False
    return tok.decode(ids, skip_special_tokens=False), True


def episode_html(ep: Episode, run: RunInfo, image: Callable[[str], str | None]) -> str:
    turns = sorted(ep.turns, key=lambda t: t.get("step_index", 0))
    valued = [token_values(t, run.mode) for t in turns]
    scale = _scale(valued)
    last = turns[-1]
    title = f"{run.label} · {ep.episode_id}"
    head = (f'<h1>{esc(title)}</h1><div class="meta">env <b>{esc(run.env)}</b> · mode <b>{esc(run.mode)}</b> · task '
            f'<b>{esc(last.get("task_id", ""))}</b> · step <b>{esc(ep.step)}</b> · {len(turns)} turns · outcome '
            f'<b id="outcome">{_num(last.get("outcome"))}</b> · policy versions '
            f'{esc(", ".join(str(v) for v in sorted({t.get("policy_version") for t in turns}, key=str)))}</div>'
            + (_legend(scale) if any(vals for vals, _ in valued) else ""))
    body = []
    prev = None
    for turn, (values, what) in zip(turns, valued):
        status = str(turn.get("status", ""))
        prompt = ""
        if run.tokenizer is not None and turn.get("prompt_ids"):
            text, whole = _prompt_part(turn, prev, run.tokenizer)
            label = "prompt" if whole else "new in the prompt"
            prompt = f'<details{"" if whole else " open"}><summary>{label}</summary>{messages_html(text)}</details>'
        finish = f' · {esc(turn["finish_reason"])}' if turn.get("finish_reason") else ""
        adv = (turn.get("meta") or {}).get("advantage")
        adv_line = (f" · advantage mean {_num(adv.get('mean'))} [{_num(adv.get('min'))}, {_num(adv.get('max'))}]"
                    if isinstance(adv, dict) else "")
        body.append(
            f'<section class="turn status-{esc(status)}" id="turn-{esc(turn.get("step_index"))}">'
            f'<h2>turn {esc(turn.get("step_index"))} · <span class="status">{esc(status)}</span> · version '
            f'{esc(turn.get("policy_version"))}{finish}{adv_line}</h2>{prompt}'
            f'<h3>response <span class="meta">({esc(what)})</span></h3>{response_html(turn, run, scale, values, what)}'
            f'<h3>next state</h3>{next_state_html(turn.get("next_state") or {}, image)}'
            f'<div class="signals"><div><h3>PRM votes</h3>{prm_html(turn.get("prm") or {})}</div>'
            f'<div><h3>OPD hint</h3>{opd_html(turn.get("opd") or {})}</div></div>'
            f'<div class="meta">outcome {_num(turn.get("outcome"))}{" · episode ends" if turn.get("episode_done") else ""}</div>'
            f'</section>')
        prev = turn
    return page(title, head + "".join(body), "../assets/view.css", back="../index.html")


def _scale(valued: list[tuple[list[float] | None, str]]) -> float:
    """The |value| at which a token is fully coloured: the largest among the turns shown together."""
    return max((abs(v) for vals, _ in valued if vals for v in vals), default=0.0) or 1.0


def _legend(scale: float) -> str:
    return (f'<div class="meta legend">token colour: <span style="background:{colour(1, 1)}">pushed up</span> '
            f'<span style="background:{colour(-1, 1)}">pushed down</span>, full colour at |value| = {scale:.4g}; '
            f'hover a token for its values</div>')


def turns_html(turns: list[dict[str, Any]], run: RunInfo) -> str:
    """A few turns' responses, each token coloured by its value as on an episode page, on one
    scale: the W&B token panel of a step's sampled turns (a fragment; the colours are inline)."""
    valued = [token_values(t, run.mode) for t in turns]
    scale = _scale(valued)
    parts = [_legend(scale)] if any(vals for vals, _ in valued) else []
    for turn, (values, what) in zip(turns, valued):
        parts.append(f'<h3>{esc(turn.get("episode_id", ""))} · turn {esc(turn.get("step_index", ""))} · '
                     f'<span class="meta">{esc(what)}</span></h3>{response_html(turn, run, scale, values, what)}')
    return '<div style="font-family:sans-serif"><style>pre.resp{white-space:pre-wrap}</style>' + "".join(parts) + "</div>"


def token_panel(config: dict[str, Any]) -> Callable[[list[Turn]], str]:
    """The HTML of a run's sampled turns (turns_html) for W&B's token panel; `config` is the
    run's resolved config (its model gives the tokenizer, its mode what a token's value is)."""
    tok = RunTokenizer(config)

    def panel(turns: list[Turn]) -> str:
        records = [turn_record(t) for t in turns]
        needs_tok = any(r.get("response_ids") for r in records)
        run = RunInfo("", str(config.get("name", "")), str(config["env"]["name"]), str(config["mode"]["name"]),
                      tok.get() if needs_tok else None)
        return turns_html(records, run)

    return panel


def page(title: str, body: str, css: str, back: str | None = None, scripts: tuple[str, ...] = ()) -> str:
    nav = f'<nav><a href="{back}">index</a></nav>' if back else ""
    js = "".join(f'<script src="{s}"></script>' for s in scripts)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<link rel="stylesheet" href="{css}"></head><body>{nav}{body}{js}</body></html>\n')
