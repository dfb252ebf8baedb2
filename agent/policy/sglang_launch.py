"""`policy=sglang`: attach to a running SGLang server (`policy.url=`) or launch one.

On a GPU host the same config that runs the embedded engine here launches
`python -m sglang.launch_server` for the model's HF folder; weights then sync through
`/update_weights_from_disk` exactly as with the embedded engine. The launched server is a
child process in its own process group and is stopped with the run, Ctrl-C included.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import httpx

from agent.policy.models import cache_root, load_model, save_model, smollm2_dir
from agent.policy.sglang_client import SGLangClient


def hf_folder(name_or_path: str) -> Path:
    """A folder SGLang can load for a model word: smollm2's cached copy, tiny saved once, or a path."""
    if name_or_path == "smollm2":
        return smollm2_dir()
    if name_or_path == "tiny":
        target = cache_root() / "tiny"
        if not (target / "config.json").is_file():
            model, tok = load_model("tiny")
            save_model(model, tok, target)
        return target
    path = Path(name_or_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a Hugging Face model folder (no config.json)")
    return path


def launch_command(model_dir: Path, host: str, port: int, extra_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model_dir), "--host", host,
            "--port", str(port), *extra_args]


def wait_healthy(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"sglang.launch_server exited with code {proc.returncode} before it was healthy")
        try:
            r = httpx.get(f"{url}/health", timeout=5.0)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as e:
            last = type(e).__name__
        time.sleep(1.0)
    raise TimeoutError(f"SGLang server at {url} not healthy after {timeout_s:.0f}s (last: {last})")


def _stop(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def connect_or_launch(cfg: Any) -> tuple[SGLangClient, Any, list[Callable[[], Any]]]:
    """(client, tokenizer, closers) for `policy=sglang`."""
    from transformers import AutoTokenizer

    pc = cfg.policy
    model_dir = hf_folder(str(cfg.model.path))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    closers: list[Callable[[], Any]] = []
    url = pc.get("url")
    if not url:
        host, port = str(pc.host), int(pc.port)
        log_path = Path(cfg.run_dir) / "sglang_server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("ab")
        proc = subprocess.Popen(launch_command(model_dir, host, port, list(pc.extra_args)), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        closers += [lambda: _stop(proc), log.close]
        url = f"http://{host}:{port}"
        try:
            wait_healthy(url, float(pc.launch_timeout_s), proc)
        except BaseException:
            for fn in reversed(closers):
                fn()
            raise
    else:
        wait_healthy(str(url), float(pc.launch_timeout_s))
    client = SGLangClient(str(url), timeout=float(cfg.timeouts.step_s))
    closers.append(client.aclose)
    return client, tokenizer, closers
