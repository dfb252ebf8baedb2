"""SWE-bench-format instance records: loading (JSONL, JSON, parquet) and where each one runs.

A record has at least instance_id, repo, base_commit, test_patch, problem_statement,
FAIL_TO_PASS and PASS_TO_PASS (SWE-bench, SWE-bench Verified, SWE-Gym and SWE-smith all do);
`patch` (the gold patch) gives the task its oracle; version and environment_setup_commit are
kept as they are. The image is the record's `image` / `image_name` / `docker_image` field, else
for a synthesized record (`synth`, envs/swe/synth.py) the image of its base commit, built on
first use; else SWE-bench's own name for the instance's eval image (`sweb.eval.x86_64.<id>:latest`, also with the
`swebench/` namespace), which must already exist on this machine: nothing is pulled
(`python -m envs.swe.build` builds one for a local repository). Optional: `user` (who runs the
episode and the tests), `test_cmd`, `eval_script`, `log_parser`, `eval_type` (grading.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envs.swe import bundled, synth

REQUIRED = ("instance_id", "repo", "base_commit", "test_patch", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS")
IMAGE_FIELDS = ("image", "image_name", "docker_image")


class InstanceError(ValueError):
    """A record or file that cannot be used (with the reason)."""


def load_instances(path: str | Path) -> list[dict[str, Any]]:
    """Records from a .jsonl, .json (a list) or .parquet file, checked for the required fields."""
    p = Path(path)
    if not p.is_file():
        raise InstanceError(f"no instance file at {p}")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(p).to_pylist()
    elif p.suffix == ".json":
        rows = json.loads(p.read_text())
        if not isinstance(rows, list):
            raise InstanceError(f"{p}: a .json instance file must hold a list of records")
    else:
        rows = []
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise InstanceError(f"{p}:{n}: not JSON ({e.msg})") from None
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise InstanceError(f"{p}: record {n} is not an object")
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise InstanceError(f"{p}: record {n} ({row.get('instance_id', '?')}) lacks {', '.join(missing)}")
    if not rows:
        raise InstanceError(f"{p} holds no records")
    return rows


def image_candidates(record: dict[str, Any]) -> list[str]:
    """Image names to look for, best first (a bundled record's image is built, not looked up)."""
    named = [str(record[k]) for k in IMAGE_FIELDS if record.get(k)]
    iid = str(record["instance_id"]).lower()
    return named + [f"sweb.eval.x86_64.{iid}:latest", f"swebench/sweb.eval.x86_64.{iid.replace('__', '_1776_')}:latest"]


def resolve_image(record: dict[str, Any]) -> str:
    """The image the record runs in, found on any configured Docker engine (the sandbox then
    goes where it is). Raises InstanceError naming what was looked for."""
    if synth.is_synth(record):
        try:
            return synth.instance_image(record)
        except KeyError as e:
            raise InstanceError(e.args[0]) from None
    if bundled.is_bundled(record) and not any(record.get(k) for k in IMAGE_FIELDS):
        try:
            return bundled.instance_image(record)
        except KeyError as e:
            raise InstanceError(e.args[0]) from None
    from envs.sandbox import placement

    tried = image_candidates(record)
    for tag in tried:
        if placement.hosts_with(tag):
            return tag
    raise InstanceError(f"no image for {record['instance_id']} on the Docker engines: looked for {', '.join(tried)} "
                        "(build or load it first; nothing is pulled)")


def sandbox_user(record: dict[str, Any]) -> str:
    """Bundled images have the non-root user `agent`; SWE-bench images run as root."""
    return str(record.get("user") or ("agent" if bundled.is_bundled(record) else "root"))
