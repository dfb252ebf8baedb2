"""Keep a finished run as a record under docs/results/<experiment>/<run>/: what the report and
a reader need, small enough to commit.

    python -m experiments.record RUN_DIR docs/results/learn-toolcall/outcome-s0 --command "python -m ..." [--log LOG]

Copies metrics.jsonl, config.yaml and tasks.json (the warm start's too), gzips turns.jsonl, keeps
the run's printed log, and writes `command` (what made it) and machine.json (the CPU it ran on,
its bf16/AMX flags and threads), so a number in the report always names its machine.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from agent.policy.models import cpu_flags

KEPT = ("metrics.jsonl", "config.yaml", "tasks.json", "demos.json")


def machine(cpuinfo: str = "/proc/cpuinfo", command: str = "") -> dict[str, Any]:
    """The CPU model, the flags that decide the engine's and learner's precision, and threads:
    the OMP_NUM_THREADS the command set, else every core."""
    model, flags = platform.processor() or "unknown", cpu_flags(cpuinfo)
    try:
        model = next((line.partition(":")[2].strip() for line in Path(cpuinfo).read_text().splitlines()
                      if line.partition(":")[0].strip() == "model name"), model)
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    threads = re.search(r"(?:^|\s)OMP_NUM_THREADS=(\d+)\s", command)
    return {"cpu": model, "flags": [f for f in wanted if f in flags],
            "threads": int(threads.group(1)) if threads else os.cpu_count(),
            "python": platform.python_version()}


def keep(run_dir: Path, out: Path, command: str, log: Path | None = None) -> list[Path]:
    """Copy run `run_dir`'s record to `out`; returns the files written."""
    if not (run_dir / "metrics.jsonl").is_file():
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl: not a finished run dir")
    written = []
    for sub in ("", "warm_start"):
        src, dst = run_dir / sub, out / sub
        if not src.is_dir():
            continue
        dst.mkdir(parents=True, exist_ok=True)
        for name in KEPT:
            if (src / name).is_file():
                written.append(Path(shutil.copy2(src / name, dst / name)))
        if (src / "turns.jsonl").is_file():
            with open(src / "turns.jsonl", "rb") as f, open(dst / "turns.jsonl.gz", "wb") as raw, \
                    gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as g:  # same run, same bytes
                shutil.copyfileobj(f, g)
            written.append(dst / "turns.jsonl.gz")
    if log is not None:
        written.append(Path(shutil.copy2(log, out / "run.log")))
    (out / "command").write_text(command.strip() + "\n")
    (out / "machine.json").write_text(json.dumps(machine(command=command), indent=1) + "\n")
    return [*written, out / "command", out / "machine.json"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.record", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--command", required=True, help="the exact command that made the run")
    ap.add_argument("--log", type=Path, help="the run's printed output")
    args = ap.parse_args(argv)
    try:
        files = keep(args.run_dir, args.out, args.command, args.log)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(files)} files -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
