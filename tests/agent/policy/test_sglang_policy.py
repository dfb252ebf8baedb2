"""policy=sglang: attach to a running SGLang-compatible server over HTTP (our embedded engine
stands in for SGLang here; on a GPU host the same config attaches to or launches SGLang)."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from agent.policy.base import PolicyUnavailable, SamplingParams
from agent.policy.engine import Engine
from agent.policy.models import save_model, tiny_model
from agent.policy.server import arg_parser as server_args, serve
from agent.policy.sglang_client import SGLangClient
from agent.policy.sglang_launch import connect_or_launch, hf_folder, launch_command, server_env
from tests.cli import REPO, run_cli

log = logging.getLogger(__name__)
KEY = "sglang-test-key"  # what SGLang's --api-key would be


@pytest.fixture(scope="module")
def server():
    engine = Engine("tiny", dtype="float32", seed=0)
    handle = serve(engine, api_key=KEY)
    yield handle
    handle.stop()
    engine.close()


def test_attach_runs_rollouts_through_the_sglang_client(tmp_path, server):
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:FirstCharEnv", "model=tiny", "policy=sglang", "mode=eval",
                f"policy.url={server.url}", f"policy.api_key={KEY}", "steps=1", "tasks_per_step=2", "group_size=2", "sampling.max_new_tokens=4",
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
    keyed = launch_command(folder, "127.0.0.1", 30000, ["--tp", "2"], api_key="k")
    assert keyed[-3:] == ["--api-key=k", "--tp", "2"]  # SGLang's own flag: every request must carry the key
    # a random key may begin with '-' (token_urlsafe): the launched server must still read it as the key
    ours = launch_command(folder, "127.0.0.1", 30000, [], template=["{python}", "-m", "agent.policy.server"],
                          api_key="-Xk")
    assert server_args().parse_args(ours[3:]).api_key == "-Xk"
    with pytest.raises(FileNotFoundError):
        hf_folder(str(Path(tmp_path) / "nowhere"))


def test_launched_server_is_not_a_rank_of_torchruns_world(monkeypatch):
    for k, v in {"RANK": "0", "WORLD_SIZE": "4", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x", "MY_VAR": "kept"}.items():
        monkeypatch.setenv(k, v)
    env = server_env()
    assert env["MY_VAR"] == "kept" and env["PATH"] == os.environ["PATH"]
    assert not {"RANK", "WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RUN_ID"} & set(env)


# ---- health and restarts: a launched "SGLang" that is really the embedded engine's server --------
ENGINE_SERVER = ["{python}", "-m", "agent.policy.server", "--model", "{model_path}", "--host", "{host}",
                 "--port", "{port}", "--dtype", "float32", "--weights-dir", "{run_dir}"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command_override() -> str:
    return "policy.command=[" + ",".join(f'"{part}"' for part in ENGINE_SERVER) + "]"


def sglang_cfg(tmp_path: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "experiments" / "conf"), version_base=None):
        return compose("config", overrides=["model=tiny", "policy=sglang", command_override(), f"policy.port={free_port()}",
                                            "policy.launch_timeout_s=180", "timeouts.step_s=120", f"run_dir={tmp_path}",
                                            *overrides])


def kill(server) -> int:
    pid = server.proc.pid
    os.killpg(pid, signal.SIGKILL)
    server.proc.wait(30)
    return pid


def test_a_launched_server_that_dies_is_restarted_with_the_latest_weights(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="agent.policy.sglang_launch")

    async def go():
        async with AsyncExitStack() as stack:
            client, tok = connect_or_launch(sglang_cfg(tmp_path, "policy.max_restarts=1"), stack)
            return client.supervisor, await restarts(client, tok)

    async def restarts(client, tok):
        server = client.supervisor
        model, _ = tiny_model(seed=1)
        save_model(model, tok, tmp_path / "v1")
        ids = tok("restart me")["input_ids"]
        base = await client.score(ids, 1)
        assert await client.update_weights(str(tmp_path / "v1"), 1) == 1
        before = await client.score(ids, 1)
        first_pid = kill(server)
        t0 = time.monotonic()
        after = await client.score(ids, 1)  # fails, restarts the server, loads v1 into it, asks again
        out = await client.generate(ids, SamplingParams(max_new_tokens=2))
        second_pid = kill(server)
        with pytest.raises(PolicyUnavailable, match="max_restarts=1 restarts are used up"):
            await client.generate(ids, SamplingParams(max_new_tokens=2))
        return base, before, after, out, first_pid, second_pid, time.monotonic() - t0

    server, (base, before, after, out, first_pid, second_pid, took) = asyncio.run(go())
    assert first_pid != second_pid and server.restarts == 1 and server.proc.poll() is not None
    assert max(abs(a - b) for a, b in zip(before, after)) < 1e-4  # the restarted server serves v1 ...
    assert max(abs(a - b) for a, b in zip(base, before)) > 1e-2   # ... which is not the base model
    assert out.weight_version == 1
    assert "is down (exit code -9): restart 1 of 1" in caplog.text and "is back" in caplog.text
    log.info("restart took %.1fs", took)


def test_an_attached_server_that_dies_is_a_clear_error_not_a_hang():
    engine = Engine("tiny", dtype="float32", seed=0)
    handle = serve(engine)
    ids = engine.tokenizer("hello")["input_ids"]

    async def go():
        async with SGLangClient(handle.url, timeout=30, api_key=handle.api_key) as client:
            await client.generate(ids, SamplingParams(max_new_tokens=2))
            handle.stop()
            t0 = time.monotonic()
            with pytest.raises(PolicyUnavailable, match="stopped answering .* attached"):
                await client.generate(ids, SamplingParams(max_new_tokens=2))
            return time.monotonic() - t0

    try:
        took = asyncio.run(go())
    finally:
        handle.stop()
        engine.close()
    assert took < 30


RUN = ["env=custom", "env.entry_point=tests.toy_envs:FirstCharEnv", "model=tiny", "mode=outcome", "n_envs=4",
       "tasks_per_step=2", "group_size=4", "sampling.max_new_tokens=2", "learner.lr=0.01", "learner.max_staleness=0",
       "wandb.mode=disabled", "policy=sglang", "progress=false"]


def start_run(*args: str) -> tuple[subprocess.Popen, list[str]]:
    """The CLI in the background; its output lines (logs and errors) collect in the returned list."""
    p = subprocess.Popen([sys.executable, "-m", "experiments.run", *args], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []

    def pump() -> None:
        for line in p.stdout:
            lines.append(line)

    threading.Thread(target=pump, daemon=True).start()
    return p, lines


def wait_rows(path: Path, n: int, p: subprocess.Popen, lines: list[str], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not (path.is_file() and len(path.read_text().splitlines()) >= n):
        assert p.poll() is None, f"the run ended (code {p.returncode}) before step {n}: {''.join(lines)[-3000:]}"
        assert time.monotonic() < deadline, f"no step {n} after {timeout_s}s: {''.join(lines)[-3000:]}"
        time.sleep(0.2)


def stop_run(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


@pytest.mark.slow
def test_a_training_run_survives_its_launched_server_dying(tmp_path):
    # slow turns (+env.delay_s): a tiny-model step takes under 0.1 s, so steps 2 and 3 could end
    # between two polls of wait_rows and the kill then hit a server the run no longer needed
    p, lines = start_run(*RUN, "+env.delay_s=0.5", command_override(), f"policy.port={free_port()}",
                         "policy.launch_timeout_s=180", "steps=4", f"run_dir={tmp_path}")
    try:
        wait_rows(tmp_path / "metrics.jsonl", 2, p, lines)
        pid = int(re.search(r"policy server pid (\d+)", "".join(lines)).group(1))
        os.killpg(pid, signal.SIGKILL)
        assert p.wait(600) == 0, "".join(lines)[-3000:]
    finally:
        stop_run(p)
    out = "".join(lines)
    assert "is down (exit code -9): restart 1 of 3" in out and "is back" in out, out
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[1]["policy_version"] > 0, "step 1 trained nothing: the run cannot show which weights came back"
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    # after the restart the rollouts were sampled by the latest weights, not the base model
    assert {t["policy_version"] for t in turns if t["episode_id"].startswith("s2-")} == {rows[1]["policy_version"]}
    assert rows[2]["status_counts"].get("infra_error", 0) == 0


@pytest.mark.slow
def test_a_run_attached_to_a_server_that_dies_stops_with_one_line(tmp_path):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "agent.policy.server", "--model", "tiny", "--dtype", "float32",
                               "--port", str(port), "--api-key", KEY, "--weights-dir", str(tmp_path)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        p, lines = start_run(*RUN, f"policy.url=http://127.0.0.1:{port}", f"policy.api_key={KEY}",
                             "policy.launch_timeout_s=180", "steps=50",
                             f"run_dir={tmp_path}")
        try:
            wait_rows(tmp_path / "metrics.jsonl", 1, p, lines)
            os.killpg(server.pid, signal.SIGKILL)
            code = p.wait(120)  # not a hang: the first request that finds no server ends the run
        finally:
            stop_run(p)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)
    out = "".join(lines)
    assert code != 0 and f"error: the policy server at http://127.0.0.1:{port} stopped answering" in out, out[-3000:]
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) < 50


def test_frozen_teacher_served_by_a_server_scores_as_the_in_process_one(tmp_path, server):
    """mode.teacher_url: the frozen teacher's log-probs come from a server of the initial
    weights (on GPU hosts the PRM's SGLang) instead of an engine in the run's process."""
    from experiments.factories import _build_teacher

    async def go():
        async with AsyncExitStack() as stack:
            remote = _build_teacher(sglang_cfg(tmp_path, "mode=opd", f"mode.teacher_url={server.url}",
                                               f"mode.teacher_api_key={KEY}"), None, stack)
            local = _build_teacher(sglang_cfg(tmp_path, "mode=opd"), None, stack)
            assert isinstance(remote, SGLangClient) and isinstance(local, Engine)
            ids = local.tokenizer("score this with a hint")["input_ids"]
            return ids, await remote.score(ids, 3), await local.score(ids, 3)

    ids, a, b = asyncio.run(go())
    assert len(a) == len(ids) - 3 and max(abs(x - y) for x, y in zip(a, b)) < 1e-4
