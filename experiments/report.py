"""`python -m experiments.report [--out FILE]`: docs/results.md built from the committed run
records alone, one section per experiment; the same records give the same file, byte for byte.

Records live in docs/results/<experiment>/<run>/ (experiments/record.py writes them): a training
run has metrics.jsonl and config.yaml, a benchmark (`python -m experiments.bench NAME --record
DIR`) has bench.json; either may have `command`, machine.json and run.log (wall time and peak RSS
are read from its last lines). Each experiment folder has an index.yaml holding what cannot be
computed; every key is optional:

    title: The Quickstart                # the section's heading (default: the folder's name)
    order: 10                            # sections are sorted by (order, folder name); default 1000
    description: what was run and why    # markdown
    shows: one plain sentence on what the experiment shows
    does_not_show: ... and what it does not
    command: python -m experiments.run ...   # for runs that kept no `command` file (marked so)
    machine: {cpu: AMD EPYC, flags: [avx2], threads: 2}   # for runs that kept no machine.json (marked)
    beside: nothing else running         # what else ran on the machine
    date: 2026-12-06
    runs:                                # these runs first, in this order; any other run folder follows, sorted
      - amd-epyc-avx512bf16              # a name, or a mapping overriding the keys above for that run:
      - {name: s1, date: 2026-12-05, beside: a test suite}
    comparisons:                         # experiments.compare's tables and plot, once per entry
      - title: outcome vs integrated     # (default: one comparison of every training run)
        name: contrast                   # in the PNG's name: img/<experiment>-<name>-<figure>.png
        runs: [outcome-s0, integrated-s0]    # default: every training run
        figure: heldout_outcome          # compare's --figure (default: compare's headline)
        at: [0, 4, 8, 12]                # compare's --at (default: 0, N/2, N)
        same: [learner.max_tokens_per_micro_batch]   # compare's --same: keys that do not split groups
    tables:                              # figures with no JSON record, recorded by hand
      - caption: ...
        header: [command, figures, goal]
        rows: [[..., ..., ...]]
        source: where the figures come from (default: recorded by hand from earlier text)
    notes: markdown after the tables
    readme: {label: The Quickstart job, runs: [amd-epyc-avx512bf16]}   # into README.md's block: these
                                         # runs' (default: all) wall time, peak RSS and CPU, under label

A new experiment folder with an index.yaml and runs needs no code change. PNGs are drawn into
img/ beside the output file. Without --out the report writes docs/results.md and rewrites the
block of README.md between the results markers (the Quickstart's figures and their CPU).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from experiments import compare as cmp

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results"
OUT = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
README_BEGIN = "<!-- results: written by `python -m experiments.report` from the records of docs/results -->"
README_END = "<!-- /results -->"
INDEX_KEYS = {"title", "order", "description", "shows", "does_not_show", "command", "machine", "beside", "date",
              "runs", "comparisons", "tables", "notes", "readme"}
RUN_KEYS = {"name", "command", "machine", "beside", "date"}
BY_HAND = "†"


class ReportError(ValueError):
    """A record or index that cannot be reported; the message says which and why."""


@dataclass
class Record:
    """One run folder: its files, with the index's fallbacks for what it did not keep."""

    name: str
    dir: Path
    meta: dict[str, Any]
    command: str | None = None
    command_by_hand: bool = False
    machine: dict[str, Any] | None = None
    machine_by_hand: bool = False
    wall_s: float | None = None
    peak_rss_gb: float | None = None
    bench: dict[str, Any] | None = None

    @property
    def trained(self) -> bool:
        return (self.dir / "metrics.jsonl").is_file()


@dataclass
class Experiment:
    name: str
    dir: Path
    index: dict[str, Any]
    records: list[Record] = field(default_factory=list)

    @property
    def title(self) -> str:
        return str(self.index.get("title", self.name))


# ---- reading ---------------------------------------------------------------------------------

def wall_seconds(log: str) -> float | None:
    """The run's wall time from its log's last lines: `/usr/bin/time -v`'s Elapsed line, or the
    `wall=181` / `wall 420s` line the job scripts append."""
    elapsed = re.findall(r"Elapsed \(wall clock\) time \([^)]*\): (?:(\d+):)?(\d+):(\d+(?:\.\d+)?)", log)
    if elapsed:
        h, m, s = elapsed[-1]
        return int(h or 0) * 3600 + int(m) * 60 + float(s)
    plain = re.findall(r"\bwall[= ](\d+(?:\.\d+)?)s?\b", log)
    return float(plain[-1]) if plain else None


def peak_rss_gb(log: str) -> float | None:
    """The run's own `peak RSS 6.32 GB` line, else `/usr/bin/time -v`'s maximum resident set."""
    own = re.findall(r"peak RSS (\d+(?:\.\d+)?) GB", log)
    if own:
        return float(own[-1])
    kb = re.findall(r"Maximum resident set size \(kbytes\): (\d+)", log)
    return int(kb[-1]) / 1e6 if kb else None


def load_index(d: Path) -> dict[str, Any]:
    path = d / "index.yaml"
    if not path.is_file():
        return {}
    try:
        index = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ReportError(f"{path}: not YAML ({str(e).splitlines()[0]})")
    if not isinstance(index, dict):
        raise ReportError(f"{path}: must be a mapping of {', '.join(sorted(INDEX_KEYS))}")
    unknown = set(index) - INDEX_KEYS
    if unknown:
        raise ReportError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(INDEX_KEYS))}")
    return index


def _run_entries(d: Path, index: dict[str, Any]) -> list[dict[str, Any]]:
    found = sorted(p.name for p in d.iterdir() if p.is_dir() and any(
        (p / f).is_file() for f in ("metrics.jsonl", "bench.json", "run.log")))
    entries = [e if isinstance(e, dict) else {"name": str(e)} for e in index.get("runs") or []]
    for e in entries:
        if set(e) - RUN_KEYS or "name" not in e:
            raise ReportError(f"{d / 'index.yaml'}: a run entry takes {', '.join(sorted(RUN_KEYS))} and needs a name: {e}")
        if e["name"] not in found:
            raise ReportError(f"{d / 'index.yaml'}: run {e['name']!r} has no folder with metrics.jsonl, bench.json or run.log")
    listed = {e["name"] for e in entries}
    return entries + [{"name": n} for n in found if n not in listed]  # a run added later is never left out


def load_record(d: Path, entry: dict[str, Any], index: dict[str, Any]) -> Record:
    meta = {k: entry.get(k, index.get(k)) for k in ("command", "machine", "beside", "date")}
    r = Record(entry["name"], d / entry["name"], meta)
    if (r.dir / "command").is_file():
        r.command = (r.dir / "command").read_text().strip()
    elif meta["command"]:
        r.command, r.command_by_hand = str(meta["command"]).strip(), True
    if (r.dir / "machine.json").is_file():
        r.machine = _json(r.dir / "machine.json")
    elif meta["machine"]:
        r.machine, r.machine_by_hand = dict(meta["machine"]), True
    if (r.dir / "run.log").is_file():
        log = (r.dir / "run.log").read_text(errors="replace")
        r.wall_s, r.peak_rss_gb = wall_seconds(log), peak_rss_gb(log)
    if (r.dir / "bench.json").is_file():
        r.bench = _json(r.dir / "bench.json")
    return r


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON ({e})")


def load_experiments(records: Path = RECORDS) -> list[Experiment]:
    """Every experiment folder under `records`, in the report's order."""
    if not records.is_dir():
        raise ReportError(f"{records}: no such records folder")
    out = []
    for d in sorted(p for p in records.iterdir() if p.is_dir()):
        index = load_index(d)
        e = Experiment(d.name, d, index)
        e.records = [load_record(d, entry, index) for entry in _run_entries(d, index)]
        if e.records or index:
            out.append(e)
    return sorted(out, key=lambda e: (e.index.get("order", 1000), e.name))


class _Run(cmp.Run):
    """compare's Run reading each figure from its rows once: the tables ask for it many times."""

    def readings(self, path: tuple[str, ...]) -> dict[int, cmp.Reading]:
        cache = self.__dict__.setdefault("_readings", {})
        if path not in cache:
            cache[path] = super().readings(path)
        return cache[path]


def load_run(d: Path) -> _Run:
    run = cmp.load_run(d)
    return _Run(**{f.name: getattr(run, f.name) for f in fields(run)})


# ---- writing ---------------------------------------------------------------------------------

def _shown(path: Path) -> str:
    """A record's path as the report prints it: relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def fmt_wall(s: float | None) -> str:
    if s is None:
        return ""
    s = round(s)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def fmt_machine(m: dict[str, Any] | None) -> str:
    if not m:
        return "not recorded"
    flags = m.get("flags")
    text = str(m.get("cpu", "?")) + (f" ({', '.join(flags)})" if flags else "")
    return text + (f"; {m['note']}" if m.get("note") else "")


def _cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(map(_cell, header)) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(_cell, row)) + " |" for row in rows]) + "\n"


def commands_block(records: list[Record]) -> str:
    """Each distinct command once, after a comment naming its runs."""
    by_cmd: dict[str, list[str]] = {}
    for r in records:
        if r.command:
            by_cmd.setdefault(r.command, []).append(r.name + (f" {BY_HAND}" if r.command_by_hand else ""))
    if not by_cmd:
        return ""
    body = "\n".join(f"# {', '.join(names)}\n{cmd}" for cmd, names in by_cmd.items())
    return f"```\n{body}\n```\n"


def machines_table(records: list[Record]) -> str:
    rows = []
    for r in records:
        m = r.machine or {}
        rows.append([r.name, r.meta.get("date") or "", fmt_machine(r.machine) + (f" {BY_HAND}" if r.machine_by_hand else ""),
                     m.get("threads", ""), r.meta.get("beside") or "", fmt_wall(r.wall_s),
                     f"{r.peak_rss_gb:.2f} GB" if r.peak_rss_gb is not None else ""])
    return md_table(["run", "date", "CPU (flags)", "threads", "beside it", "wall", "peak RSS"], rows)


def _pass1(rows: list[dict[str, Any]], step: int | None) -> str:
    got = [x for x in rows if "heldout/pass@1_lo" in x and (step is None or x.get("step") == step)]
    if not got:
        return ""
    row = got[-1]  # as compare reads a step: its last row
    return f"{row['heldout/pass@1']:.3f} [{row['heldout/pass@1_lo']:.3f}, {row['heldout/pass@1_hi']:.3f}]"


def pass1_table(runs: list[cmp.Run], at: list[int]) -> str:
    """Held-out pass@1 per run with its Wilson 95% interval, before the warm start when the run
    had one, and after each number of updates."""
    if not any("heldout/pass@1_lo" in row for r in runs for row in r.rows):
        return ""
    before = []
    for r in runs:
        ws = r.dir / "warm_start" / "metrics.jsonl"
        ws_rows = [json.loads(x) for x in ws.read_text().splitlines() if x.strip()] if ws.is_file() else []
        before.append(_pass1([x for x in ws_rows if x.get("phase") == "before warm start"], None))
    head = ["run"] + (["before warm start"] if any(before) else []) + [f"after {k}" for k in at]
    rows = []
    for r, b in zip(runs, before):
        n = next((row["heldout/pass@1_n"] for row in r.rows if "heldout/pass@1_n" in row), "?")
        rows.append([f"{r.dir.name} (n={n})"] + ([b] if any(before) else []) + [_pass1(r.rows, k) for k in at])
    return "held-out pass@1 per run [Wilson 95% interval], n held-out tasks\n\n" + md_table(head, rows)


def comparison(e: Experiment, spec: dict[str, Any], img: Path, many: bool) -> str:
    """compare's tables for `spec`'s runs, its command, and its headline figure's PNG."""
    trained = {r.name: r for r in e.records if r.trained}
    names = [str(n) for n in spec.get("runs", list(trained))]
    missing = [n for n in names if n not in trained]
    if missing:
        raise ReportError(f"{e.dir / 'index.yaml'}: comparison runs {', '.join(missing)} are not training runs here")
    try:
        runs = [load_run(trained[n].dir) for n in names]
        figure = cmp.headline(runs, spec.get("figure"))
    except cmp.CompareError as err:
        raise ReportError(f"{e.dir}: {err}")
    at = [int(k) for k in spec["at"]] if spec.get("at") else cmp.default_at(runs, figure[2])
    same = [str(k) for k in spec.get("same") or []]
    groups = cmp.group_runs(runs, same)
    command = "python -m experiments.compare " + " ".join(_shown(r.dir) for r in runs) + " --out DIR --at " + \
        ",".join(map(str, at)) + (f" --figure {spec['figure']}" if spec.get("figure") else "") + \
        (f" --same {','.join(same)}" if same else "")
    parts = [f"### {spec.get('title', 'Comparison')}\n" if many or spec.get("title") else "",
             f"```\n{command}\n```\n", pass1_table(runs, at), cmp.at_steps_table(runs, figure, at),
             cmp.groups_table(groups, figure, at), cmp.rise_table(groups, figure, at),
             cmp.tests_table(groups, figure, at)]
    png = "-".join([e.name] + ([str(spec["name"])] if spec.get("name") else []) + [figure[0]]) + ".png"
    fig = cmp.figure_plot(groups, figure)
    if fig is not None:
        import matplotlib.pyplot as plt

        img.mkdir(parents=True, exist_ok=True)
        try:
            fig.savefig(img / png, dpi=100, metadata={"Software": None})
        finally:
            plt.close(fig)
        parts.append(f"![{figure[1]}, {e.title}]({img.name}/{png})\n")
    return "\n".join(p for p in parts if p)


def hand_table(t: dict[str, Any]) -> str:
    source = t.get("source", "recorded by hand from the earlier text of this report; no JSON record")
    return (f"{t.get('caption', '')} ({BY_HAND} {source})\n\n" if t.get("caption") else f"{BY_HAND} {source}\n\n") + \
        md_table([str(h) for h in t["header"]], [list(row) for row in t["rows"]])


def _flat(v: Any, prefix: str = "") -> list[str]:
    if isinstance(v, dict):
        return [x for k, sub in v.items() for x in _flat(sub, f"{prefix}{k}.")]
    if isinstance(v, float):
        return [f"{prefix[:-1]}={v:.4g}"]
    return [f"{prefix[:-1]}={json.dumps(v)}"]


def bench_table(records: list[Record]) -> str:
    rows = [[r.name, f"`{r.command}`" if r.command else "", fmt_machine(r.machine),
             ", ".join(map(str, (r.machine or {}).get("load", []))), "; ".join(_flat(r.bench))] for r in records if r.bench is not None]
    if not rows:
        return ""
    return "Benchmark records (bench.json; load: 1-minute load average at start and end)\n\n" + \
        md_table(["record", "command", "CPU (flags)", "load", "figures"], rows)


def section(e: Experiment, img: Path) -> str:
    ix = e.index
    parts = [f"## {e.title}\n", f"Records: `{_shown(e.dir)}/`.\n"]
    if ix.get("description"):
        parts.append(str(ix["description"]).strip() + "\n")
    if ix.get("shows"):
        parts.append(f"**What it shows:** {str(ix['shows']).strip()}\n")
    if ix.get("does_not_show"):
        parts.append(f"**What it does not show:** {str(ix['does_not_show']).strip()}\n")
    runs = [r for r in e.records if r.bench is None]  # a benchmark's command and machine are in its table
    if runs:
        parts += [commands_block(runs), machines_table(runs)]
        if any(r.command_by_hand or r.machine_by_hand for r in runs):
            parts.append(f"{BY_HAND} recorded by hand from the earlier text of this report: the run kept no "
                         "`command` file or machine.json.\n")
    elif ix.get("machine"):  # figures recorded by hand: the machine they were measured on
        m = ix["machine"]
        parts.append(f"Machine: {fmt_machine(m)}" + (f", {m['threads']} threads" if m.get("threads") else "") +
                     "".join(f"; {ix[k]}" for k in ("beside", "date") if ix.get(k)) + ".\n")
    parts.append(bench_table(e.records))
    if any(r.trained for r in e.records):
        specs = ix.get("comparisons") or [{}]
        parts += [comparison(e, spec, img, len(specs) > 1) for spec in specs]
    parts += [hand_table(t) for t in ix.get("tables") or []]
    if ix.get("notes"):
        parts.append(str(ix["notes"]).strip() + "\n")
    return "\n".join(p for p in parts if p)


def build(records: Path = RECORDS, out: Path = OUT) -> str:
    """Write the report to `out` (its PNGs into img/ beside it); returns its text."""
    exps = load_experiments(records)
    img = out.parent / "img"
    head = ("# Results\n\nBuilt by `python -m experiments.report` from the run records under "
            f"`{_shown(records)}/` alone: edit a record's index.yaml, not this file. Each section names the "
            "command that made its runs and the machine each ran on; figures marked "
            f"{BY_HAND} were recorded by hand before the runs kept their own.\n\n" +
            "\n".join(f"- [{e.title}](#{_anchor(e.title)})" for e in exps) + "\n")
    text = "\n".join([head] + [section(e, img) for e in exps])
    text = re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


def _anchor(title: str) -> str:
    """GitHub's heading anchor."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def readme_block(records: Path = RECORDS) -> str:
    """README's figures: wall time and peak RSS of each run of the experiments marked `readme`,
    with the CPU they ran on, between the results markers."""
    lines = []
    for e in load_experiments(records):
        spec = e.index.get("readme")
        if not spec:
            continue
        if not isinstance(spec, dict) or set(spec) - {"label", "runs"}:
            raise ReportError(f"{e.dir / 'index.yaml'}: readme takes {{label: ..., runs: [...]}}")
        names = [str(n) for n in spec.get("runs", [r.name for r in e.records])]
        for r in (r for r in e.records if r.name in names):
            m = r.machine or {}
            what = ", ".join(x for x in (fmt_wall(r.wall_s) and f"{fmt_wall(r.wall_s)} wall",
                                         r.peak_rss_gb is not None and f"{r.peak_rss_gb:.1f} GB peak RSS" or "") if x)
            lines.append(f"{spec.get('label', e.title)}: {what or 'no wall time recorded'} on an {fmt_machine(r.machine)}, "
                         f"{m.get('threads', '?')} threads, {r.meta.get('beside') or 'load not recorded'} "
                         f"({r.meta.get('date') or 'date not recorded'}; `{_shown(r.dir)}`).")
    return "\n".join([README_BEGIN, *(f"- {x}" for x in lines), README_END])


def rewrite_readme(readme: Path = README, records: Path = RECORDS) -> bool:
    """Replace README's results block; returns whether it changed."""
    text = readme.read_text()
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        raise ReportError(f"{readme}: no block between {README_BEGIN!r} and {README_END!r}")
    new = text[:begin] + readme_block(records) + text[end + len(README_END):]
    readme.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="where the report goes (default docs/results.md, and README's block)")
    ap.add_argument("--records", type=Path, default=RECORDS, help="the records folder (default docs/results)")
    args = ap.parse_args(argv)
    try:
        build(args.records, args.out or OUT)
        if args.out is None:
            rewrite_readme(README, args.records)
    except (ReportError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"written: {args.out or OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
