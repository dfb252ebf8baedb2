"""The learner checkpoint folder both learners write and read (either resumes the other's):
`model/` (HF weights), `optimizer.pt` and `learner.json` (step, policy version, learner step),
put in place atomically."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


def checkpoint_tmp(directory: str | os.PathLike) -> Path:
    """A fresh folder next to `directory` to write a checkpoint into (see checkpoint_commit)."""
    final = Path(directory)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def checkpoint_commit(tmp: Path, directory: str | os.PathLike, step: int, policy_version: int, learner_step: int) -> Path:
    """Write learner.json into `tmp` and put it in place of `directory` (a crash leaves the old one or the new one)."""
    final = Path(directory)
    (tmp / "learner.json").write_text(json.dumps({"step": step, "policy_version": policy_version, "learner_step": learner_step}))
    if final.exists():
        old = final.with_name(final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)
    return final


def checkpoint_info(directory: Path) -> dict[str, Any]:
    """learner.json of a checkpoint folder: {"step", "policy_version", "learner_step"}."""
    if not (directory / "learner.json").is_file():
        raise FileNotFoundError(f"no learner checkpoint in {directory}")
    return json.loads((directory / "learner.json").read_text())

