"""`python -m experiments.bench NAME`: run one benchmark, print its figures as one JSON line last.

Each benchmark is a module experiments/bench/NAME.py with `main(argv: list[str]) -> dict`;
the figures are ratios measured side by side in the same run (never absolute timings alone).
`all` runs every benchmark and writes one JSON per benchmark plus a summary table. SIGTERM stops
a benchmark as Ctrl-C does: one line, and every sandbox it started removed.

`--record DIR` (anywhere in the arguments) also keeps the figures as a record the report reads
(experiments/report.py): DIR/bench.json, DIR/command and DIR/machine.json (the CPU, its flags,
threads, and the 1-minute load average before and after, since other jobs skew every rate); with
`all`, one such record per benchmark under DIR/<name>/.
"""
from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shlex
import sys
from pathlib import Path
from typing import Any

from envs.progress import Progress
from envs.sandbox.sweeper import sigterm_as_sigint


def names() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))


def run_one(name: str, argv: list[str]) -> dict:
    if name not in names():
        raise SystemExit(f"unknown benchmark {name!r}; choose one of: {', '.join(names())}, all")
    return importlib.import_module(f"experiments.bench.{name}").main(argv)


def split_record(argv: list[str]) -> tuple[list[str], Path | None]:
    """argv without `--record DIR` / `--record=DIR`, and DIR."""
    out, record, it = [], None, iter(argv)
    for a in it:
        if a == "--record":
            record = next(it, None)
            if record is None:
                raise SystemExit("--record needs a folder, e.g. --record docs/results/bench/engine-quiet")
        elif a.startswith("--record="):
            record = a.partition("=")[2]
        else:
            out.append(a)
    return out, None if record is None else Path(record)


def write_record(out: Path, argv: list[str], figures: dict[str, Any], load_before: float) -> None:
    """Keep one benchmark's figures with the command that made them and the machine they ran on."""
    from experiments.record import machine  # imports torch: only when a record is asked for

    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    (out / "command").write_text(shlex.join(["python", "-m", "experiments.bench", *argv]) + "\n")
    m = machine() | {"load": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    (out / "machine.json").write_text(json.dumps(m, indent=1) + "\n")


def main(argv: list[str]) -> None:
    argv, record = split_record(argv)
    if not argv:
        raise SystemExit(f"usage: python -m experiments.bench NAME [args] [--record DIR]; NAME is one of: "
                         f"{', '.join(names())}, all")
    name, rest = argv[0], argv[1:]
    load_before = os.getloadavg()[0]
    if name != "all":
        with Progress(f"bench {name}"):
            figures = run_one(name, rest)
        if record is not None:
            write_record(record, argv, figures, load_before)
        print(json.dumps(figures), flush=True)
        return
    out = Path("runs/bench")
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    with Progress("bench", total=len(names())) as bar:
        for n in names():
            bar.update(status=n)
            try:
                summary[n] = run_one(n, rest)
            except Exception as e:  # one broken benchmark must not hide the others' figures
                summary[n] = {"error": f"{type(e).__name__}: {e}"}
            (out / f"{n}.json").write_text(json.dumps(summary[n], indent=2))
            if record is not None:
                write_record(record / n, [n, *rest], summary[n], load_before)
                load_before = os.getloadavg()[0]
            bar.advance()
    lines = ["| benchmark | figures |", "|---|---|"]
    lines += [f"| {n} | {json.dumps(v)} |" for n, v in summary.items()]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    sigterm_as_sigint()
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit("interrupted: the benchmark was stopped, and every sandbox it started removed")
