"""`python -m experiments.compare RUN_DIR... --out DIR`: runs side by side and, across seeds, per
mode with 95% intervals and paired tests; a markdown report and PNG plots.

Reads each run dir's config.yaml (env, mode, seed, the rest of the config) and metrics.jsonl.
DIR/report.md holds:
- one row per run: final and best of each figure the run has, throughput, time per step;
- the paper's Table-3 layout, one row per run: the headline figure (personalization when the
  runs have it, else the held-out outcome per task, else reward; or `--figure KEY`) after 0, N/2 and N updates, or after the updates
  given with `--at 0,8,16`;
- the same per group: runs that differ only in their seed form a group, named by its mode plus
  every config key whose value differs between runs, e.g. `binary model.name=tiny` (bookkeeping
  keys such as run_dir, name and wandb.* never count, nor keys that follow from a differing
  `<group>.name`, e.g. model.path with model.name). Each cell is `0.41 ± 0.05 (n=3 seeds)`: the
  mean over seeds with a 95% Student t interval (`--ci bootstrap` for the percentile bootstrap,
  too narrow over a handful of seeds: it never leaves the range of the values);
- each group's change from the first reported step to the later ones, with a paired test (by
  item where runs log per-item values, else by seed);
- paired sign-flip permutation tests between the groups of one env at each reported step, by
  seed (a seed's value in one group against the same seed's in the other: same seed, same
  held-out tasks) and, where runs log per-item values, by item. Groups whose seeds differ are
  not paired; the report says so. With n seeds the by-seed p cannot go below 2/2^n (0.25 for 3).
DIR also gets one PNG per figure: per group the mean over seeds with its 95% band shaded, and
each seed's own line faintly. A figure no run has is left out.

A figure in a metrics row is a number, a dict with a "mean", or per-item values: a list (items
by position) or a dict {item id: number, or the item's samples as a list, averaged} (e.g.
`heldout/outcomes`, k outcomes per held-out task; null samples are left out). The run's figure is
then the mean of its items; for a group each item is first averaged over the seeds (the held-out
split has its own seed, so every seed sees the same items) and the interval is over items.
`--figure` takes a key below or a dotted path into the rows (`--figure held_out.outcomes`).
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import yaml

from envs.progress import Progress
from learner.stats import Estimate, bootstrap_mean, paired_permutation_p, t_mean

Figure = tuple[str, str, tuple[str, ...]]  # (key in report, title, how to read it from a metrics row)
FIGURES: list[Figure] = [
    ("reward", "reward (mean)", ("reward_mean",)),
    ("outcome", "outcome (mean)", ("outcome_mean",)),
    ("prm_score", "PRM score (mean)", ("prm_score_mean",)),
    ("opd_accept", "OPD acceptance rate", ("opd_accept_rate",)),
    ("personalization", "personalization (held out, per task)", ("personalization/scores",)),
    ("heldout_pass1", "pass@1 (held out)", ("heldout/pass@1",)),
    ("heldout_outcome", "outcome per held-out task (mean)", ("heldout/outcomes",)),
    ("judge_audit", "judge audit: Pearson r, PRM score vs Monte-Carlo value", ("judge_audit", "pearson")),
    ("throughput", "throughput (response tokens/s)", ("throughput", "tokens_per_s")),
    ("step_time", "time per step (s)", ("timings", "step_s")),
]
# Figures where the table shows final and best; the others show the mean over steps.
PROGRESS = ("reward", "outcome", "prm_score", "opd_accept", "personalization", "heldout_pass1", "heldout_outcome")
# The viewer's curves: progress, and whether the judge still tracks what followed its turns (rollout.branch).
VIEWED = (*PROGRESS, "judge_audit")
# Config keys that differ between runs without making them different experiments.
BOOKKEEPING = ("seed", "run_dir", "name", "resume", "progress", "wandb")
CI: dict[str, Callable[[Sequence[float]], Estimate]] = {"t": t_mean, "bootstrap": bootstrap_mean}


class CompareError(ValueError):
    """A run dir that cannot be compared; the message says which and why."""


@dataclass(frozen=True)
class Reading:
    """A figure of one run at one step: its value and, when the row has them, per-item values."""

    value: float
    items: dict[str, float] | None = None


def _number(v: Any, bools: bool = False) -> float | None:
    if isinstance(v, bool) and not bools:
        return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def _reading(v: Any) -> Reading | None:
    if isinstance(v, dict) and "mean" in v:
        v = v["mean"]
    x = _number(v)
    if x is not None:
        return Reading(x)
    if isinstance(v, list):
        v = {str(i): e for i, e in enumerate(v)}
    if isinstance(v, dict):
        v = {k: _samples_mean(e) if isinstance(e, list) else e for k, e in v.items()}
        # per-item values; null items (NaN when logged) are left out, booleans (passed) count 0/1
        items = {str(k): _number(e, bools=True) for k, e in v.items() if e is not None}
        if items and None not in items.values():
            return Reading(float(np.mean(list(items.values()))), items)
    return None


def _samples_mean(samples: list) -> Any:
    """An item given as its samples (k episodes of one held-out task): their mean, null samples
    (excluded episodes) left out; null when none is left; the list itself when not numbers."""
    xs = [_number(x, bools=True) for x in samples if x is not None]
    if None in xs:
        return samples
    return float(np.mean(xs)) if xs else None


@dataclass
class Run:
    dir: Path
    env: str
    mode: str
    seed: Any
    rows: list[dict[str, Any]]
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.env}/{self.mode}/seed{self.seed}"

    def readings(self, path: tuple[str, ...]) -> dict[int, Reading]:
        """step -> the figure at `path` in that step's row, for every row that has it."""
        out = {}
        for r in self.rows:
            v: Any = r
            for k in path:
                v = v.get(k) if isinstance(v, dict) else None
            got = _reading(v)
            if got is not None:
                out[int(r["step"])] = got
        return out

    def series(self, path: tuple[str, ...]) -> list[tuple[int, float]]:
        return [(step, r.value) for step, r in self.readings(path).items()]


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
    return Run(d, str(env.get("name", "?")), str(mode.get("name", "?")), cfg.get("seed", "?"), rows, cfg)


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


def headline(runs: list[Run], name: str | None = None) -> Figure:
    """The figure of the Table-3 layout and the tests: `name` (a FIGURES key or a dotted path into
    the metrics rows), else personalization when a run has it, else the held-out outcome per task
    (paired by task), else reward."""
    if name is None:
        return next((f for key in ("personalization", "heldout_outcome") for f in FIGURES
                     if f[0] == key and any(r.series(f[2]) for r in runs)), FIGURES[0])
    fig = next((f for f in FIGURES if f[0] == name), (name, name, tuple(name.split("."))))
    if not any(r.series(fig[2]) for r in runs):
        raise CompareError(f"no run has the figure {name!r} (a key of {', '.join(f[0] for f in FIGURES)} "
                           "or a dotted path into the metrics rows)")
    return fig


def default_at(runs: list[Run], path: tuple[str, ...]) -> list[int]:
    """0, N/2 and N updates, N the last step any run has the figure at."""
    n = max(max(r.readings(path), default=0) for r in runs)
    return sorted({0, n // 2, n})


def at_steps_table(runs: list[Run], figure: Figure, at: list[int]) -> str:
    """Table-3 layout: one row per run, the headline figure after each number of updates."""
    key, title, path = figure
    head = ["run", "mode"] + [f"{key} after {k}" for k in at]
    lines = [f"{title} after 0..N updates", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        lines.append("| " + " | ".join([r.dir.name, r.mode] + [_fmt(value_after(r, path, k)) for k in at]) + " |")
    return "\n".join(lines) + "\n"


# ---- groups of seeds -------------------------------------------------------------------------

@dataclass
class Group:
    """Runs of one experiment that differ only in their seed."""

    label: str
    env: str
    runs: list[Run]

    def at(self, path: tuple[str, ...], step: int) -> list[tuple[Any, Reading]]:
        """(seed, reading) of every run that has the figure at `step`."""
        out = []
        for r in self.runs:
            got = r.readings(path).get(step)
            if got is not None:
                out.append((r.seed, got))
        return out


def _flatten(cfg: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in cfg.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v if isinstance(v, str) else json.dumps(v)
    return out


def group_runs(runs: list[Run], same: Sequence[str] = ()) -> list[Group]:
    """Runs grouped by env, mode and every other config key whose value differs between them (in
    the order of first appearance). A key under a config group (`model.path`) whose value follows
    from that group's differing name (`model.name`) adds nothing and is left out of the label.
    Keys in `same` do not split groups: settings that change how a run computes, not what (e.g.
    learner.max_tokens_per_micro_batch, the packing of one batch's gradient into micro-batches)."""
    flat = [_flatten(r.config) for r in runs]
    shared = set.intersection(*(set(f) for f in flat)) if flat else set()
    varying = {k for k in shared if k.split(".")[0] not in BOOKKEEPING and k not in same and len({f[k] for f in flat}) > 1}

    def follows_name(k: str) -> bool:
        name = k.split(".")[0] + ".name"
        seen: dict[str, str] = {}
        return k != name and name in varying and all(seen.setdefault(f[name], f[k]) == f[k] for f in flat)

    extra_keys = sorted(k for k in varying if k not in ("env.name", "mode.name") and not follows_name(k))
    many_envs = len({r.env for r in runs}) > 1
    groups: dict[tuple[str, ...], Group] = {}
    for r, f in zip(runs, flat):
        extra = tuple(f"{k}={f[k]}" for k in extra_keys)
        label = " ".join((f"{r.env}/{r.mode}" if many_envs else r.mode,) + extra)
        groups.setdefault((r.env, r.mode) + extra, Group(label, r.env, [])).runs.append(r)
    return list(groups.values())


def _item_means(readings: list[Reading]) -> dict[str, float] | None:
    """Each item's mean over the seeds, when every seed reports per-item values for the same items."""
    items = [r.items for r in readings if r.items is not None]
    if not items or len(items) < len(readings) or any(i.keys() != items[0].keys() for i in items):
        return None
    return {k: float(np.mean([i[k] for i in items])) for k in items[0]}


def _has_items(groups: list[Group], path: tuple[str, ...]) -> bool:
    return any(rd.items for g in groups for r in g.runs for rd in r.readings(path).values())


def estimate(group: Group, path: tuple[str, ...], step: int, ci: str = "t") -> tuple[Estimate, str] | None:
    """The group's mean at `step` with its 95% interval, and what n counts: over seeds, or over
    items (each averaged over the seeds) when every seed has per-item values for the same items."""
    got = [rd for _, rd in group.at(path, step)]
    if not got:
        return None
    items = _item_means(got)
    if items is not None:
        return CI[ci](list(items.values())), f"{len(items)} items × {_seeds(len(got))}"
    return CI[ci]([rd.value for rd in got]), _seeds(len(got))


def _seeds(n: int) -> str:
    return f"{n} seed" + ("s" if n != 1 else "")


def _cell(got: tuple[Estimate, str] | None) -> str:
    if got is None:
        return ""
    e, n = got
    return f"{e.fmt()} (n={n})" if math.isfinite(e.half_width) else f"{e.value:.2f} (n={n})"


def groups_table(groups: list[Group], figure: Figure, at: list[int], ci: str = "t") -> str:
    """The Table-3 layout per group: mean ± 95% interval after each number of updates."""
    key, title, path = figure
    head = ["group", "seeds"] + [f"{key} after {k}" for k in at]
    lines = [f"{title} per group: mean ± 95% interval", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in groups:
        cells = [g.label, ", ".join(str(r.seed) for r in g.runs)] + [_cell(estimate(g, path, k, ci)) for k in at]
        lines.append("| " + " | ".join(cells) + " |")
    how = ("Student t interval over the n values (df = n - 1; one value has none)" if ci == "t" else
           "percentile bootstrap of the mean (10,000 resamples, seed 0; over a handful of seeds it never leaves "
           "the range of the values and is too narrow: `--ci t` is the honest one there)")
    lines += ["", f"± is the larger half-width of the 95% {how}."]
    if _has_items(groups, path):
        lines[-1] += " Per-item values are averaged over the seeds item by item first; n then counts items."
    return "\n".join(lines) + "\n"


def pair(a: Group, b: Group, path: tuple[str, ...], step: int, by: str,
         step_b: int | None = None) -> tuple[list[float], list[float]] | str:
    """The values of `a` at `step` and of `b` at `step_b` (default: the same step) paired by
    "seed" or by "item", or why they cannot be ("" when a group has no value there)."""
    got_a, got_b = a.at(path, step), b.at(path, step if step_b is None else step_b)
    if not got_a or not got_b:
        return ""
    for g, got in ((a, got_a), (b, got_b)):
        seeds = [s for s, _ in got]
        if len(set(seeds)) < len(seeds):
            return f"{g.label} has two runs with one seed"
    ra, rb = dict(got_a), dict(got_b)
    if set(ra) != set(rb):
        return f"seeds differ ({', '.join(map(str, ra))} vs {', '.join(map(str, rb))})"
    seeds = list(ra)
    if by == "seed":
        return [ra[s].value for s in seeds], [rb[s].value for s in seeds]
    ia, ib = _item_means([ra[s] for s in seeds]), _item_means([rb[s] for s in seeds])
    if ia is None or ib is None:
        return "not every seed has per-item values for the same items"
    if ia.keys() != ib.keys():
        return "the groups' items differ"
    return [ia[i] for i in ia], [ib[i] for i in ia]


def rise_table(groups: list[Group], figure: Figure, at: list[int]) -> str:
    """Each group's change from its first reported step to each later one, paired by item (each
    item's mean over the seeds) where the runs log per-item values, else by seed."""
    key, title, path = figure
    if len(at) < 2:
        return ""
    by = "item" if _has_items(groups, path) else "seed"
    head = ["group", "pairs by"] + [f"after {k} - after {at[0]}" for k in at[1:]]
    lines = [f"{title}: change within each group", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in groups:
        cells = [g.label, by]
        for k in at[1:]:
            got = pair(g, g, path, k, by, step_b=at[0])
            if isinstance(got, str):
                cells.append(f"not paired ({got})" if got else "")
                continue
            x, y = got
            d = t_mean(np.subtract(x, y).tolist())
            cells.append(f"Δ={d.value:+.2f} ± {d.half_width:.2f}, p={paired_permutation_p(x, y):.3g} (n={len(x)})")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Δ: the mean change with the larger half-width of its 95% Student t interval over the pairs; "
              "p: two-sided paired sign-flip permutation test (as below)."]
    return "\n".join(lines) + "\n"


def tests_table(groups: list[Group], figure: Figure, at: list[int]) -> str:
    """p-values of the paired sign-flip test for each pair of groups of one env at each step."""
    key, title, path = figure
    pairs = [(a, b) for a, b in itertools.combinations(groups, 2) if a.env == b.env]
    if not pairs:
        return ""
    with_items = _has_items(groups, path)
    kinds = ("seed", "item") if with_items else ("seed",)
    head = ["A - B", "pairs by"] + [f"after {k}" for k in at]
    lines = [f"{title}: paired tests between groups", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    skipped: dict[tuple[str, str], list[int]] = {}  # (which pair and test, why not) -> steps
    seed_ns = set()
    for a, b in pairs:
        for by in kinds:
            cells = [f"{a.label} - {b.label}", by]
            for k in at:
                got = pair(a, b, path, k, by)
                if isinstance(got, str):
                    cells.append("not paired" if got else "")
                    if got:
                        skipped.setdefault((f"{a.label} vs {b.label} by {by}", got), []).append(k)
                    continue
                x, y = got
                if by == "seed":
                    seed_ns.add(len(x))
                diff = float(np.mean(np.subtract(x, y)))
                cells.append(f"p={paired_permutation_p(x, y):.3g}, Δ={diff:+.2f} (n={len(x)})")
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Two-sided paired sign-flip permutation test of the mean difference A - B (Δ; exact up to 16 "
              "non-zero differences, Monte Carlo beyond). By seed: each seed's value in A against the same "
              "seed's in B (the same seed, the same held-out tasks)."]
    if with_items:
        lines[-1] += (" By item: each item's mean over the seeds in A against the same item's in B; it asks whether "
                      "these trained policies differ on these items, not whether other seeds would agree.")
    if seed_ns:
        lines[-1] += " With n seeds the by-seed p cannot go below 2/2^n: " + ", ".join(
            f"{2 / 2 ** n:.3g} with {n}" for n in sorted(seed_ns)) + ", however consistent the difference."
    if skipped:
        lines += ["", "Not paired:", ""]
        lines += [f"- {what}, after {', '.join(map(str, ks))}: {why}" for (what, why), ks in skipped.items()]
    return "\n".join(lines) + "\n"


# ---- plots -----------------------------------------------------------------------------------

def figure_plot(groups: list[Group], figure: Figure, ci: str = "t") -> Any:
    """A matplotlib Figure of `figure` vs RL step: per group the mean over its seeds with the 95%
    band shaded (where n >= 2) and each seed's own line faintly (None when no run has it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    key, title, path = figure
    if not any(r.series(path) for g in groups for r in g.runs):
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, g in enumerate(groups):
        steps = sorted({s for r in g.runs for s in r.readings(path)})
        if not steps:
            continue
        color = f"C{i % 10}"
        if len(g.runs) > 1:
            for r in g.runs:
                s = r.series(path)
                ax.plot([x for x, _ in s], [y for _, y in s], color=color, alpha=0.3, linewidth=0.8)
        est = [estimate(g, path, k, ci)[0] for k in steps]  # each of these steps has a value
        ax.plot(steps, [e.value for e in est], marker="o", markersize=3, color=color,
                label=f"{g.label} (n={len(g.runs)})")
        lo, hi = np.array([e.lo for e in est]), np.array([e.hi for e in est])
        finite = np.isfinite(lo) & np.isfinite(hi)
        if finite.any():
            ax.fill_between(steps, np.where(finite, lo, np.nan), np.where(finite, hi, np.nan), color=color,
                            alpha=0.2, linewidth=0)
    ax.set_xlabel("RL step")
    ax.set_title(f"{title}: mean over seeds, 95% band" if any(len(g.runs) > 1 for g in groups) else title)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def plots(groups: list[Group], out: Path, figures: list[Figure], ci: str = "t") -> list[Path]:
    import matplotlib.pyplot as plt

    written = []
    for figure in figures:
        fig = figure_plot(groups, figure, ci)
        if fig is None:
            continue
        try:
            p = out / f"{figure[0]}.png"
            fig.savefig(p, dpi=100)
            written.append(p)
        finally:
            plt.close(fig)
    return written


def compare(run_dirs: list[str | Path], out: str | Path, at: list[int] | None = None, figure: str | None = None,
            ci: str = "t", same: Sequence[str] = ()) -> Path:
    """Write DIR/report.md and the PNGs; returns the report's path."""
    with Progress("compare", total=len(run_dirs) + 1) as bar:
        runs = []
        for d in run_dirs:
            bar.update(status=f"reading {Path(d).name}")
            runs.append(load_run(d))
            bar.advance()
        head = headline(runs, figure)
        at = default_at(runs, head[2]) if at is None else at
        groups = group_runs(runs, same)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        bar.update(status="plotting")
        pngs = plots(groups, out, FIGURES + ([head] if head not in FIGURES else []), ci)
        bar.advance()
    report = out / "report.md"
    body = ["# Run comparison", "", table(runs), "", at_steps_table(runs, head, at), "",
            groups_table(groups, head, at, ci), "", rise_table(groups, head, at), "", tests_table(groups, head, at), ""]
    body += [f"![{p.stem}]({p.name})" for p in pngs]
    body += ["", "Run dirs:", ""] + [f"- `{r.dir}`" for r in runs]
    report.write_text("\n".join(body) + "\n")
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.compare", description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", help="run dirs (each with metrics.jsonl and config.yaml)")
    ap.add_argument("--out", required=True, help="where report.md and the PNGs go")
    ap.add_argument("--at", default=None, help="updates for the Table-3 layout, e.g. 0,8,16 (default 0, N/2, N)")
    ap.add_argument("--figure", default=None,
                    help="the figure of the Table-3 layout and the tests: a figure key (personalization, reward, "
                         "...) or a dotted path into the metrics rows (default: personalization if any run has it, "
                         "else heldout_outcome, else reward)")
    ap.add_argument("--ci", choices=sorted(CI), default="t",
                    help="95%% interval of a group's mean: Student t (default) or percentile bootstrap")
    ap.add_argument("--same", default="", help="config keys whose values do not split groups, comma-separated "
                                                "(settings that change how runs compute, not what)")
    args = ap.parse_args(argv)
    try:
        at = [int(x) for x in args.at.split(",")] if args.at else None
    except ValueError:
        sys.exit(f"error: --at takes comma-separated update counts such as 0,8,16, not {args.at!r}")
    try:
        report = compare(args.run_dirs, args.out, at, args.figure, args.ci, [k for k in args.same.split(",") if k])
    except CompareError as e:
        sys.exit(f"error: {e}")
    print(report.read_text(), end="")
    print(f"written: {report}")


if __name__ == "__main__":
    main()
