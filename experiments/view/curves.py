"""The runs' curves as small inline SVG plots (no script, no network): one plot per figure of
experiments.compare that some run has, one line per run."""
from __future__ import annotations

from experiments.compare import FIGURES, VIEWED, Run
from experiments.view.pages import esc

#: one colour per run, in order (runs beyond these reuse them)
RUN_COLOURS = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be123c")
_W, _H, _PAD = 260, 120, 28


def _plot(title: str, series: list[tuple[int, list[tuple[int, float]]]]) -> str:
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 1, y1 + 1

    def at(x: float, y: float) -> tuple[float, float]:
        return (_PAD + (x - x0) / ((x1 - x0) or 1) * (_W - 2 * _PAD),
                _H - _PAD - (y - y0) / (y1 - y0) * (_H - 2 * _PAD))

    lines = []
    for k, pts in series:
        c = RUN_COLOURS[k % len(RUN_COLOURS)]
        points = [(x, y, *at(x, y)) for x, y in sorted(pts)]
        path = " ".join(f"{px:.1f},{py:.1f}" for _, _, px, py in points)
        dots = "".join(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="{c}"><title>r{k} step {x}: {y:.4g}</title></circle>'
                       for x, y, px, py in points)
        lines.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{path}"/>{dots}')
    axes = (f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#999"/>'
            f'<text x="{_PAD}" y="{_H - 8}" font-size="10">{x0}</text>'
            f'<text x="{_W - _PAD}" y="{_H - 8}" font-size="10" text-anchor="end">step {x1}</text>'
            f'<text x="2" y="{_PAD}" font-size="10">{y1:.3g}</text><text x="2" y="{_H - _PAD}" font-size="10">{y0:.3g}</text>')
    return (f'<figure class="curve"><figcaption>{esc(title)}</figcaption><svg width="{_W}" height="{_H}" '
            f'viewBox="0 0 {_W} {_H}" xmlns="http://www.w3.org/2000/svg">{axes}{"".join(lines)}</svg></figure>')


def curves_html(runs: list[Run]) -> str:
    """The viewed figures of every run, one plot each; figures no run has are left out."""
    plots = []
    for key, title, path in FIGURES:
        if key not in VIEWED:
            continue
        series = [(k, run.series(path)) for k, run in enumerate(runs)]
        series = [(k, pts) for k, pts in series if pts]
        if series:
            plots.append(_plot(title, series))
    return f'<div class="curves">{"".join(plots)}</div>' if plots else '<p class="meta">no curves: metrics.jsonl has no figures yet</p>'
