"""A misconfigured run stops before it starts, with one line saying what to do."""
from __future__ import annotations

from tests.test_run_cli import run_cli


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
