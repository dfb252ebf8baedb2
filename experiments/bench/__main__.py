"""`python -m experiments.bench NAME`: run one benchmark, print its figures as one JSON line last.

Each benchmark is a module experiments/bench/NAME.py with `main(argv: list[str]) -> dict`;
the figures are ratios measured side by side in the same run (never absolute timings alone).
`all` runs every benchmark and writes one JSON per benchmark plus a summary table. SIGTERM stops
a benchmark as Ctrl-C does: one line, and every sandbox it started removed.
"""
from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path

from envs.progress import Progress
from envs.sandbox.sweeper import sigterm_as_sigint


def names() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))


def run_one(name: str, argv: list[str]) -> dict:
    if name not in names():
        raise SystemExit(f"unknown benchmark {name!r}; choose one of: {', '.join(names())}, all")
    return importlib.import_module(f"experiments.bench.{name}").main(argv)


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(f"usage: python -m experiments.bench NAME [args]; NAME is one of: {', '.join(names())}, all")
    name, rest = argv[0], argv[1:]
    if name != "all":
        with Progress(f"bench {name}"):
            figures = run_one(name, rest)
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
