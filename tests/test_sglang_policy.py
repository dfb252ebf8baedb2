"""policy=sglang: attach to a running SGLang-compatible server over HTTP (our embedded engine
stands in for SGLang here; on a GPU host the same config attaches to or launches SGLang)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.policy.engine import Engine
from agent.policy.server import serve
from agent.policy.sglang_launch import hf_folder, launch_command
from tests.test_run_cli import run_cli


@pytest.fixture(scope="module")
def server():
    engine = Engine("tiny", dtype="float32", seed=0)
    handle = serve(engine)
    yield handle
    handle.stop()
    engine.close()


def test_attach_runs_rollouts_through_the_sglang_client(tmp_path, server):
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:FirstCharEnv", "model=tiny", "policy=sglang", "mode=eval",
                f"policy.url={server.url}", "steps=1", "tasks_per_step=2", "group_size=2", "sampling.max_new_tokens=4",
                f"run_dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-2000:]
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert len(turns) == 4
    assert all(t["response_ids"] and len(t["rollout_logprobs"]) == len(t["response_ids"]) for t in turns)


def test_attach_to_nothing_fails_with_a_clear_message(tmp_path):
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:FirstCharEnv", "model=tiny", "policy=sglang", "mode=eval",
                "policy.url=http://127.0.0.1:9", "policy.launch_timeout_s=2", f"run_dir={tmp_path}")
    assert p.returncode != 0 and "not healthy" in p.stderr


def test_launch_command_and_model_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_CACHE", str(tmp_path))
    folder = hf_folder("tiny")
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
    cmd = launch_command(folder, "127.0.0.1", 30000, ["--tp", "2"])
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    assert cmd[cmd.index("--model-path") + 1] == str(folder) and cmd[-2:] == ["--tp", "2"]
    with pytest.raises(FileNotFoundError):
        hf_folder(str(Path(tmp_path) / "nowhere"))
