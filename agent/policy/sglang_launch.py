"""`policy=sglang`: attach to a running SGLang server (`policy.url=`) or launch one.

On a GPU host the same config that runs the embedded engine here launches
`python -m sglang.launch_server` for the model's HF folder; weights then sync through
`/update_weights_from_disk` exactly as with the embedded engine. Every request carries a key
(`Authorization: Bearer`, as SGLang's `--api-key` expects): `policy.api_key` (or
$OPENCLAW_POLICY_API_KEY) for an attached server; a launched one is given a random key with
`--api-key`, so `policy.command` must take that flag too. The launched server is a
child process in its own process group, stopped with the run (Ctrl-C included). When it dies
mid-run the client's next failing request restarts it (at most `policy.max_restarts` times)
and loads the latest weights into it before anything else is served. `policy.command` swaps
in any other server with SGLang's routes (the tests launch the embedded engine's; its template
may name {run_dir}, where the run's weights are written, for the engine's --weights-dir).
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import IO, Any, Awaitable, Callable

import httpx

from agent.http_guard import new_key
from agent.policy.base import PolicyUnavailable
from agent.policy.jsonhttp import ServerError
from agent.policy.models import cache_root, load_model, model_folder, save_model
from agent.policy.sglang_client import SGLangClient

log = logging.getLogger(__name__)

SGLANG_COMMAND = ["{python}", "-m", "sglang.launch_server", "--model-path", "{model_path}", "--host", "{host}",
                  "--port", "{port}"]


def hf_folder(name_or_path: str) -> Path:
    """A folder SGLang can load for a model word: its folder (models.model_folder), tiny saved once."""
    path = model_folder(name_or_path)
    if path is not None:
        return path
    target = cache_root() / "tiny"
    if not (target / "config.json").is_file():
        model, tok = load_model("tiny")
        save_model(model, tok, target)
    return target


def launch_command(model_dir: Path, host: str, port: int, extra_args: list[str],
                   template: list[str] | None = None, api_key: str | None = None, run_dir: str = "") -> list[str]:
    """`template` (default: sglang.launch_server) with {python} {model_path} {host} {port} {run_dir}
    filled, then `--api-key=KEY` when given (one word: a random key may begin with '-', which
    argparse would take for a flag), then extra_args."""
    fields = {"python": sys.executable, "model_path": str(model_dir), "host": host, "port": str(port),
              "run_dir": run_dir}
    try:
        cmd = [str(part).format(**fields) for part in (template or SGLANG_COMMAND)]
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"policy.command {template}: unknown placeholder {e}; use {{python}} {{model_path}} "
                         "{host} {port} {run_dir}") from None
    return cmd + ([f"--api-key={api_key}"] if api_key else []) + [str(a) for a in extra_args]


def wait_healthy(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the policy server exited with code {proc.returncode} before it was healthy")
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


TORCHRUN_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
                 "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}


def server_env() -> dict[str, str]:
    """This process's environment without torchrun's: under `torchrun` (learner=megatron) rank 0
    launches the server, which must not take itself for a rank of the learner's world."""
    return {k: v for k, v in os.environ.items()
            if k not in TORCHRUN_VARS and not k.startswith("TORCHELASTIC_")}


class LaunchedServer:
    """A policy server run as a child process: started, restarted when it dies (at most
    `max_restarts` times over the run), stopped. Its output goes to `log_path`."""

    def __init__(self, command: list[str], url: str, log_path: Path, launch_timeout_s: float, max_restarts: int) -> None:
        self.command, self.url, self.log_path = command, url, log_path
        self.launch_timeout_s, self.max_restarts = launch_timeout_s, max_restarts
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self._log: IO[bytes] | None = None
        self._restarted_at = -math.inf
        self._lock = asyncio.Lock()

    def start(self) -> None:
        """Launch and wait until /health answers; on failure nothing is left running."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=server_env())
        shown = ["--api-key=<key>" if c.startswith("--api-key=") else c for c in self.command]
        log.info("policy server pid %d at %s: %s (output: %s)", self.proc.pid, self.url, " ".join(shown), self.log_path)
        try:
            wait_healthy(self.url, self.launch_timeout_s, self.proc)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
        if self._log is not None:
            self._log.close()
            self._log = None

    async def recover(self, since: float, reload: Callable[[], Awaitable[None]]) -> None:
        """Restart the server unless that happened after `since`, then `reload()` the latest
        weights; one restart serves every request that failed with it."""
        async with self._lock:
            if self._restarted_at > since:
                return
            while True:
                if self.restarts >= self.max_restarts:
                    raise PolicyUnavailable(f"the policy server at {self.url} is down and policy.max_restarts="
                                            f"{self.max_restarts} restarts are used up; its output is in {self.log_path}")
                self.restarts += 1
                code = self.proc.poll() if self.proc is not None else None
                log.warning("policy server at %s is down (%s): restart %d of %d", self.url,
                            "not answering" if code is None else f"exit code {code}", self.restarts, self.max_restarts)
                await asyncio.to_thread(self.stop)
                try:
                    await asyncio.to_thread(self.start)
                    await reload()
                    break
                except (RuntimeError, TimeoutError, ServerError) as e:
                    log.warning("restart %d of the policy server failed: %s", self.restarts, e)
            self._restarted_at = time.monotonic()
            log.warning("policy server at %s is back (pid %d)", self.url, self.proc.pid if self.proc else -1)


def connect_or_launch(cfg: Any, stack: AsyncExitStack) -> tuple[SGLangClient, Any]:
    """(client, tokenizer) for `policy=sglang`; what stops the server it launches and the client goes on `stack`."""
    from transformers import AutoTokenizer

    pc = cfg.policy
    model_dir = hf_folder(str(cfg.model.path))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    url = pc.get("url")
    key = pc.get("api_key") or os.environ.get("OPENCLAW_POLICY_API_KEY")
    server = None
    if not url:
        host, port = str(pc.host), int(pc.port)
        url = f"http://{host}:{port}"
        key = key or new_key()
        command = launch_command(model_dir, host, port, list(pc.extra_args), pc.get("command"), key,
                                 str(Path(cfg.run_dir).resolve()))
        server = LaunchedServer(command, url, Path(cfg.run_dir) / "sglang_server.log", float(pc.launch_timeout_s),
                                int(pc.get("max_restarts", 3)))
        server.start()
        stack.callback(server.stop)
    else:
        wait_healthy(str(url), float(pc.launch_timeout_s))
    client = SGLangClient(str(url), timeout=float(cfg.timeouts.step_s), supervisor=server, api_key=key)
    stack.push_async_callback(client.aclose)
    return client, tokenizer
