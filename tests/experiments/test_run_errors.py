"""A misconfigured run stops before it starts, with one line saying what to do."""
from __future__ import annotations

import pytest

from tests.cli import run_cli


def test_unknown_env_lists_the_envs(tmp_path):
    p = run_cli("env=nope", "policy=oracle", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "unknown env 'nope'" in line and "toolcall" in line and "custom" in line
    assert not (tmp_path / "r").exists()
    p = run_cli("-m", "env=custom,nope", "policy=oracle", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "unknown env 'nope'" in p.stderr


def test_docker_sandbox_without_an_engine_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    p = run_cli("env=terminal", "sandbox=docker", "policy=oracle", "wandb.mode=disabled", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "no Docker engine answers" in p.stderr and "sandbox=bwrap" in p.stderr and "10-docker.sh" in p.stderr


def _bad_files(tmp_path):
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    (tmp_path / "empty").mkdir()
    return tmp_path


BAD_INPUT = {  # case -> (overrides, what the one line names)
    "data missing": (["env=toolcall", "env.data={t}/nope.jsonl"], "nope.jsonl"),
    "data malformed": (["env=toolcall", "env.data={t}/bad.jsonl"], "bad.jsonl"),
    "tasks_dir missing": (["env=terminal", "sandbox=bwrap", "env.tasks_dir={t}/nope"], "nope"),
    "tasks_dir without tasks": (["env=terminal", "sandbox=bwrap", "env.tasks_dir={t}/empty"], "empty"),
    "instances missing": (["env=swe", "env.instances={t}/nope.jsonl"], "nope.jsonl"),
    "instances malformed": (["env=swe", "env.instances={t}/bad.jsonl"], "bad.jsonl"),
    "steps not a number": (["env=toolcall", "steps=abc"], "steps='abc'"),
    "steps zero": (["env=toolcall", "steps=0"], "steps=0: must be at least 1"),
    "n_envs zero": (["env=toolcall", "n_envs=0"], "n_envs=0"),
    "tasks_per_step negative": (["env=toolcall", "tasks_per_step=-1"], "tasks_per_step=-1"),
    "group_size zero": (["env=toolcall", "group_size=0"], "group_size=0"),
    "unknown env option": (["env=toolcall", "env.bogus=1"], "has no option bogus; it takes: data,"),
}


@pytest.mark.slow  # 12 CLI starts; each imports torch + transformers (~8 s CPU)
@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_gets_one_line(tmp_path, case):
    overrides, names = BAD_INPUT[case]
    t = _bad_files(tmp_path)
    p = run_cli(*(o.format(t=t) for o in overrides), "policy=oracle", "mode=eval", "wandb.mode=disabled",
                f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    # swe needs Docker: without an engine the one line says that instead (also one line)
    assert line.startswith("error: ") and (names in line or "no Docker engine answers" in line), line
