"""`python -m envs.terminal.families --out DIR [--families sort,git] [--per-family 50] [--seed 0]`:
write generated task folders for `env.tasks_dir=DIR` (or any Harbor runner)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envs.terminal.families import write_suite
from envs.terminal.families.generators import FAMILIES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.terminal.families", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder to write the task folders into")
    ap.add_argument("--families", default="all", help=f"comma-separated, or all (default): {', '.join(FAMILIES)}")
    ap.add_argument("--per-family", type=int, default=50, help="tasks per family (default 50)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    families = "all" if args.families == "all" else [f for f in args.families.split(",") if f]
    try:
        ids = write_suite(args.out, families, args.per_family, args.seed)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(ids)} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
