"""`python -m experiments.compare RUN_DIR... --out DIR`: runs side by side, as a markdown table and PNG plots.

Reads each run dir's config.yaml (env, mode, seed) and metrics.jsonl. DIR gets `report.md` (one
row per run: final and best of each figure the run has, throughput, time per step), the paper's
Table-3 layout (the headline figure, personalization when the runs have it, after 0, N/2 and N
updates, or the updates given with `--at 0,8,16`) and one PNG per figure (figure vs RL step, one
line per run). A figure no run has is left out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# (key in report, title, how to read it from a metrics row)
FIGURES: list[tuple[str, str, tuple[str, ...]]] = [
    ("reward", "reward (mean)", ("reward_mean",)),
    ("outcome", "outcome (mean)", ("outcome_mean",)),
    ("prm_score", "PRM score (mean)", ("prm_score_mean",)),
    ("opd_accept", "OPD acceptance rate", ("opd_accept_rate",)),
    ("personalization", "personalization (held out)", ("personalization",)),
    ("throughput", "throughput (response tokens/s)", ("throughput", "tokens_per_s")),
    ("step_time", "time per step (s)", ("timings", "step_s")),
]
# Figures where the table shows final and best; the others show the mean over steps.
PROGRESS = ("reward", "outcome", "prm_score", "opd_accept", "personalization")


class CompareError(ValueError):
    """A run dir that cannot be compared; the message says which and why."""


@dataclass
class Run:
    dir: Path
    env: str
    mode: str
    seed: Any
    rows: list[dict[str, Any]]

    @property
    def label(self) -> str:
        return f"{self.env}/{self.mode}/seed{self.seed}"

    def series(self, path: tuple[str, ...]) -> list[tuple[int, float]]:
        """(step, value) for every row holding a finite number at `path` (a dict with a
        "mean" counts as its mean)."""
        out = []
        for r in self.rows:
            v: Any = r
            for k in path:
                v = v.get(k) if isinstance(v, dict) else None
            if isinstance(v, dict):
                v = v.get("mean")
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out.append((int(r["step"]), float(v)))
        return out


def load_run(run_dir: str | Path) -> Run:
    d = Path(run_dir)
    if not d.is_dir():
        raise CompareError(f"{d}: no such run dir")
    metrics = d / "metrics.jsonl"
    if not metrics.is_file():
        raise CompareError(f"{d}: no metrics.jsonl (not a run dir, or the run stopped before its first step)")
    lines = [line for line in metrics.read_text().splitlines() if line.strip()]
    rows = []
    for n, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if n < len(lines):  # only the last line may be cut (a run killed mid-write)
                raise CompareError(f"{metrics}: line {n} is not JSON")
    rows = [r for r in rows if isinstance(r, dict) and "step" in r]
    if not rows:
        raise CompareError(f"{d}: metrics.jsonl holds no step yet")
    cfg: dict[str, Any] = {}
    if (d / "config.yaml").is_file():
        cfg = yaml.safe_load((d / "config.yaml").read_text()) or {}
    env, mode = cfg.get("env", {}), cfg.get("mode", {})
    return Run(d, str(env.get("name", "?")), str(mode.get("name", "?")), cfg.get("seed", "?"), rows)


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.3g}"


def table(runs: list[Run]) -> str:
    present = [f for f in FIGURES if any(r.series(f[2]) for r in runs)]
    head = ["run", "env", "mode", "seed", "steps"]
    for key, _, _ in present:
        head += [f"{key} final", f"{key} best"] if key in PROGRESS else [f"{key} mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        cells = [r.dir.name, r.env, r.mode, str(r.seed), str(sum(1 for x in r.rows if not x.get("eval_only")))]
        for key, _, path in present:
            vals = [v for _, v in r.series(path)]
            if key in PROGRESS:
                cells += [_fmt(vals[-1] if vals else None), _fmt(max(vals) if vals else None)]
            else:
                cells.append(_fmt(sum(vals) / len(vals) if vals else None))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def value_after(run: Run, path: tuple[str, ...], updates: int) -> float | None:
    """The figure of the policy after `updates` updates: metrics row k holds held-out figures
    measured before update k+1, and the final eval_only row those after the last."""
    return dict(run.series(path)).get(updates)


def at_steps_table(runs: list[Run], at: list[int] | None = None) -> str:
    """Table-3 layout: one row per run, the headline figure after each number of updates."""
    key, title, path = next((f for f in FIGURES if f[0] == "personalization" and any(r.series(f[2]) for r in runs)),
                            FIGURES[0])
    if at is None:
        n = max(max((s for s, _ in r.series(path)), default=0) for r in runs)
        at = sorted({0, n // 2, n})
    head = ["run", "mode"] + [f"{key} after {k}" for k in at]
    lines = [f"{title} after 0..N updates", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        lines.append("| " + " | ".join([r.dir.name, r.mode] + [_fmt(value_after(r, path, k)) for k in at]) + " |")
    return "\n".join(lines) + "\n"


def plots(runs: list[Run], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for key, title, path in FIGURES:
        series = [(r, r.series(path)) for r in runs]
        if not any(s for _, s in series):
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        try:
            for r, s in series:
                if s:
                    ax.plot([x for x, _ in s], [y for _, y in s], marker="o", markersize=3, label=r.label)
            ax.set_xlabel("RL step")
            ax.set_title(title)
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
            fig.tight_layout()
            p = out / f"{key}.png"
            fig.savefig(p, dpi=100)
            written.append(p)
        finally:
            plt.close(fig)
    return written


def compare(run_dirs: list[str | Path], out: str | Path, at: list[int] | None = None) -> Path:
    """Write DIR/report.md and the PNGs; returns the report's path."""
    runs = [load_run(d) for d in run_dirs]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pngs = plots(runs, out)
    report = out / "report.md"
    body = ["# Run comparison", "", table(runs), "", at_steps_table(runs, at), ""]
    body += [f"![{p.stem}]({p.name})" for p in pngs]
    body += ["", "Run dirs:", ""] + [f"- `{r.dir}`" for r in runs]
    report.write_text("\n".join(body) + "\n")
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.compare", description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", help="run dirs (each with metrics.jsonl and config.yaml)")
    ap.add_argument("--out", required=True, help="where report.md and the PNGs go")
    ap.add_argument("--at", default=None, help="updates for the Table-3 layout, e.g. 0,8,16 (default 0, N/2, N)")
    args = ap.parse_args(argv)
    try:
        at = [int(x) for x in args.at.split(",")] if args.at else None
    except ValueError:
        sys.exit(f"error: --at takes comma-separated update counts such as 0,8,16, not {args.at!r}")
    try:
        report = compare(args.run_dirs, args.out, at)
    except CompareError as e:
        sys.exit(f"error: {e}")
    print(report.read_text(), end="")
    print(f"written: {report}")


if __name__ == "__main__":
    main()
