"""Import every module of the harness, and the libraries it loads lazily, so that Python writes
their bytecode (.pyc) once: `PYTHONDONTWRITEBYTECODE= python scripts/bytecode.py` (setup.sh).

Where PYTHONDONTWRITEBYTECODE is set (it is on this project's machines) no .pyc is ever written
on import, and the installs skip compiling (--no-compile), so every Python process (a run, a test
worker, an env worker, a torchrun rank) compiled torch and transformers again: about 12 s of CPU
before it could start. Importing what the harness imports compiles only that: some 6,000 of the
27,000 files in .venv, about 50 s of CPU against 230 s for compiling them all. A module that fails
to import here (an optional extra that is not installed) is left out and said so; nothing fails.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "envs", "learner", "experiments")
# Loaded at run time rather than at import: the model class behind the shipped and test models,
# W&B's sink, remote envs, the megatron learner, reasoning-gym's tasks.
LAZY = ("transformers.models.llama.modeling_llama", "wandb", "ray", "megatron.core", "reasoning_gym")


def modules() -> list[str]:
    names: list[str] = []
    for pkg in PACKAGES:
        names.append(pkg)
        names.extend(m.name for m in pkgutil.walk_packages([str(ROOT / pkg)], f"{pkg}."))
    return [*names, *LAZY]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    failed = []
    for name in modules():
        try:
            importlib.import_module(name)
        except BaseException as e:  # an optional extra, a module that needs a service: not this step's concern
            failed.append(f"{name} ({type(e).__name__})")
    print(f"[setup] bytecode written for {len(sys.modules)} modules" + (f"; not importable: {', '.join(failed)}" if failed else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
