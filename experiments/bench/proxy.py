"""Live-user proxy overhead: latency per request through the proxy (OpenAI chat completions)
against the same engine directly (SGLang /generate), at 1 and N concurrent sessions, same run.

The proxy runs as its own process (`python -m agent.proxy`); this process only sends requests.
`--policy embedded` (default): the proxy's process holds the engine and also serves its SGLang
routes, so both paths are one HTTP hop into the same engine. `--policy process`: the engine is
its own server (`python -m agent.policy.server`) behind the proxy, two hops. Both paths
sample the same prompt ids greedily for the same number of tokens, so the engine does identical
work and the difference is what the proxy adds (one more HTTP hop, rendering, parsing,
recording). Rounds alternate direct and proxied so load from neighbours hits both alike.
Also reported: the proxy's own time per request from its Server-Timing header, and the CPU time
the proxy process adds per request (the figure least moved by a loaded machine).

Goal: added p50 under 5 ms at 64 concurrent sessions.
`python -m experiments.bench proxy [--concurrency 1 64] [--requests 4] [--rounds 3] [--max-tokens 4]`
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from agent.chat import ChatRenderer
from agent.policy.models import load_tokenizer

KEY = "sk-bench"


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench proxy")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--requests", type=int, default=4, help="requests per session per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--policy", choices=["embedded", "process"], default="embedded",
                    help="embedded: the proxy's process holds the engine and serves its SGLang routes too (one hop "
                         "either way); process: the engine is its own server behind the proxy (two hops)")
    args = ap.parse_args(argv)
    renderer = ChatRenderer(load_tokenizer(args.model))
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt_ids = renderer.render_prompt(messages)
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as records:
        procs = []
        try:
            engine_port, proxy_port = _free_port(), _free_port()
            proxy_cmd = [sys.executable, "-m", "agent.proxy", "--model", args.model, "--port", str(proxy_port),
                         "--api-key", KEY, "--record-dir", records]
            engine_url = f"http://127.0.0.1:{engine_port}"
            if args.policy == "embedded":
                proxy_cmd += ["--engine-port", str(engine_port), "--max-batch", str(max(args.concurrency))]
            else:
                procs.append(_spawn([sys.executable, "-m", "agent.policy.server", "--model", args.model,
                                     "--port", str(engine_port), "--max-batch", str(max(args.concurrency))],
                                    f"{records}/engine.log"))
                _wait_ok(engine_url + "/health", procs[-1])
                proxy_cmd += ["--policy-url", engine_url]
            procs.append(_spawn(proxy_cmd, f"{records}/proxy.log"))
            proxy_url = f"http://127.0.0.1:{proxy_port}"
            _wait_ok(proxy_url + "/health", procs[-1])
            _wait_ok(engine_url + "/health", procs[-1])
            direct_body = {"input_ids": prompt_ids, "return_logprob": True,
                           "sampling_params": {"max_new_tokens": args.max_tokens, "temperature": 0.0,
                                               "stop_token_ids": renderer.stop_token_ids}}
            chat_body = {"model": args.model, "messages": messages, "max_tokens": args.max_tokens, "temperature": 0.0}
            figures = asyncio.run(_measure(engine_url, proxy_url, direct_body, chat_body, args, procs[-1].pid))
        finally:
            for p in reversed(procs):
                _stop(p)
    figures.update({"policy": args.policy, "model": args.model, "max_tokens": args.max_tokens, "requests_per_session": args.requests,
                    "rounds": args.rounds, "goal": "added_p50_ms < 5 at 64 sessions",
                    "load_average_1m": round(os.getloadavg()[0], 1), "cpus": os.cpu_count()})
    if "c64" in figures:
        figures["goal_met"] = figures["c64"]["added_p50_ms"] < 5.0
    return figures


async def _measure(engine_url: str, proxy_url: str, direct_body: dict, chat_body: dict, args, proxy_pid: int) -> dict:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        retries = {"n": 0}

        async def post(url: str, body: dict, headers: dict | None = None) -> tuple[float, httpx.Response]:
            """Latency of one answered request. A kept-alive connection the server closed as idle
            is retried once on a fresh one (and counted), timing the retry alone."""
            for attempt in (0, 1):
                t = time.perf_counter()
                try:
                    r = await http.post(url, json=body, headers=headers)
                except (httpx.ReadError, httpx.RemoteProtocolError):
                    if attempt:
                        raise
                    retries["n"] += 1
                    continue
                r.raise_for_status()
                return time.perf_counter() - t, r
            raise AssertionError("unreachable")

        async def direct(_: int) -> tuple[float, float | None]:
            lat, _r = await post(engine_url + "/generate", direct_body)
            return lat, None

        async def proxied(session: int) -> tuple[float, float | None]:
            lat, r = await post(proxy_url + "/v1/chat/completions", chat_body,
                                {"Authorization": f"Bearer {KEY}", "X-Session-Id": f"bench-{session}"})
            return lat, _proxy_ms(r.headers.get("server-timing", ""))

        async def run(call, c: int) -> list[tuple[float, float | None]]:
            async def session(i: int) -> list[tuple[float, float | None]]:
                return [await call(i) for _ in range(args.requests)]
            return [x for xs in await asyncio.gather(*[session(i) for i in range(c)]) for x in xs]

        await run(direct, 2), await run(proxied, 2)  # warm-up: connections, first-call allocations
        out = {}
        for c in args.concurrency:
            d_lat, p_lat, inside = [], [], []
            cpu_s = 0.0  # the proxy process's CPU in proxied runs less in direct ones (an embedded engine counts in both)
            for _ in range(args.rounds):
                cpu0 = _cpu_s(proxy_pid)
                d_lat += [x for x, _ in await run(direct, c)]
                cpu1 = _cpu_s(proxy_pid)
                answers = await run(proxied, c)
                cpu_s += (_cpu_s(proxy_pid) - cpu1) - (cpu1 - cpu0)
                for lat, own in answers:
                    p_lat.append(lat)
                    if own is not None:
                        inside.append(own)
            d50, d99, p50, p99 = (_pct(d_lat, 50), _pct(d_lat, 99), _pct(p_lat, 50), _pct(p_lat, 99))
            out[f"c{c}"] = {
                "direct_p50_ms": d50, "direct_p99_ms": d99, "proxy_p50_ms": p50, "proxy_p99_ms": p99,
                "added_p50_ms": round(p50 - d50, 3), "added_p99_ms": round(p99 - d99, 3),
                "proxy_own_p50_ms": _pct(inside, 50, scale=1.0), "proxy_own_p99_ms": _pct(inside, 99, scale=1.0),
                # CPU the proxy adds per request: unlike latencies, barely moved by other load.
                "added_cpu_ms_per_request": round(cpu_s * 1e3 / len(p_lat), 3),
                "requests": len(p_lat),
            }
        out["connection_retries"] = retries["n"]
        return out


def _pct(xs: list[float], q: int, scale: float = 1e3) -> float:
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return round(xs[0] * scale, 3)
    return round(statistics.quantiles(xs, n=100, method="inclusive")[q - 1] * scale, 3)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proxy_ms(header: str) -> float | None:
    """`proxy;dur=X` from a Server-Timing header (milliseconds)."""
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if name == "proxy" and dur:
            return float(dur)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(cmd: list[str], log_path: str) -> subprocess.Popen:
    """A server process; its output goes to a file (a pipe nobody reads would fill and stall it)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    proc.log_path = log_path  # type: ignore[attr-defined]
    return proc


def _wait_ok(url: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(proc.log_path) as log:  # type: ignore[attr-defined]
                raise RuntimeError(f"{proc.args[2]} exited with {proc.returncode}: {log.read()[-2000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not healthy after {timeout_s} s")


def _stop(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)
