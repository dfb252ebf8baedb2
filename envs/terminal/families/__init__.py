"""Procedural terminal task families: Harbor-layout task folders drawn by (family, seed, index).

`env=terminal env.families=[sort,git] env.tasks_per_family=50` runs the first 50 tasks of each
family (`env.families=all`: every family); `python -m envs.terminal.families --out DIR` writes
the same folders for `env.tasks_dir=DIR` or Harbor. Task `<family>-<index>` is variant
`index % len(variants)` of its family with parameters from its own `random.Random`, so a
(family, seed, index) is the same task on every machine, and a held-out split of the ids
(`eval.n_tasks`) draws from the same families as training. Each folder has instruction.md,
environment/setup.sh (runs on bwrap and docker alike), tests/test.sh (check.py with the expected
results in expected.json) and solution/solve.sh: one command line, the oracle's bash call.
"""
from __future__ import annotations

import atexit
import functools
import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from envs.terminal.families.generators import FAMILIES, Spec

CHECKER = Path(__file__).resolve().parent / "check.py"
TEST_SH = """#!/bin/bash
# Verifier (Harbor convention): run the result checks, write the reward to /logs/verifier/reward.txt.
# check.py runs git and python3 (named here so that a changed or shadowed one counts as tampering).
mkdir -p /logs/verifier
if python3 /tests/check.py /tests/expected.json; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def check_families(families: str | Sequence[str]) -> tuple[str, ...]:
    """The family names asked for ("all": every family), checked: an unknown one raises ValueError."""
    names = tuple(FAMILIES) if families == "all" else (families,) if isinstance(families, str) else tuple(map(str, families))
    unknown = [f for f in names if f not in FAMILIES]
    if unknown or not names:
        raise ValueError(f"unknown terminal task families {unknown or '[]'}; choose among {', '.join(FAMILIES)} (or all)")
    return names


def make_spec(family: str, index: int, seed: int = 0) -> Spec:
    """Task `index` of `family` for `seed`: its variants take turns, its parameters are its own draw."""
    variants = FAMILIES[family]
    return variants[index % len(variants)](random.Random(f"{family}/{seed}/{index}"))


def write_task(spec: Spec, folder: Path) -> None:
    """`spec` as a Harbor task folder."""
    for sub in ("environment", "tests", "solution"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "instruction.md").write_text(spec.instruction + "\n")
    setup = "\n".join(spec.setup)
    (folder / "environment" / "setup.sh").write_text(f"#!/bin/bash\n# Runs in the sandbox's work dir before the episode.\nset -e\n{setup}\n")
    (folder / "tests" / "test.sh").write_text(TEST_SH)
    shutil.copyfile(CHECKER, folder / "tests" / "check.py")
    (folder / "tests" / "expected.json").write_text(json.dumps(spec.checks, indent=1) + "\n")
    (folder / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{spec.solution}\n")


DRAWS_PER_TASK = 4  # draws tried per distinct task asked for before a family counts as exhausted


def write_suite(out: Path, families: Sequence[str], per_family: int, seed: int = 0) -> list[str]:
    """The first `per_family` distinct tasks of each family under `out` (one folder per task id);
    the ids. An index whose draw repeats an earlier task for the agent (the same instruction and
    the same oracle command; only hidden data differs) is skipped, so no held-out task is a copy
    of a training task."""
    if per_family < 1:
        raise ValueError(f"tasks_per_family must be at least 1, got {per_family}")
    ids = []
    for family in check_families(families):
        seen: set[tuple[str, str]] = set()
        for i in range(per_family * DRAWS_PER_TASK):
            spec = make_spec(family, i, seed)
            key = (spec.instruction, spec.solution)
            if key in seen:
                continue
            seen.add(key)
            ids.append(f"{family}-{i:04d}")
            write_task(spec, out / ids[-1])
            if len(seen) == per_family:
                break
        else:
            raise ValueError(f"terminal family {family!r} gave {len(seen)} distinct tasks in "
                             f"{per_family * DRAWS_PER_TASK} draws; ask for at most that many")
    return ids


@functools.lru_cache(maxsize=8)
def suite_dir(families: tuple[str, ...], per_family: int, seed: int) -> Path:
    """A folder of the generated suite, written once per process (a temporary folder removed at exit)."""
    out = Path(tempfile.mkdtemp(prefix="openclaw-terminal-families-"))
    atexit.register(shutil.rmtree, out, True)
    write_suite(out, families, per_family, seed)
    return out
