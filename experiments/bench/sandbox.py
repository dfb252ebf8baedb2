"""`python -m experiments.bench sandbox`: the Docker sandbox harness against the bare socket loop.

At each concurrency (default 1, 32, 128) the same containers run `echo hi` in a loop, two ways,
in short adjacent pairs of alternating order, so both see the same machine:
- raw: a second bash per container opened straight on the exec socket, sent the same framed
  line (shell.py's frame_command: eval + stdout and stderr end markers) with frames parsed
  inline and nothing else: the floor of this protocol;
- harness: `DockerSandbox.exec` (captures, caps, timeouts, result objects).
Also: each side's CPU time in this process per command (the harness's own cost, which other
jobs' load blurs less than rates), warm-pool acquire latency (p50/p99, the pool refilled
between acquires) and the daemon's container create+start rate with several threads.
Goals: harness >= 0.8x raw at 128; warm acquire p50 < 20 ms.
"""
from __future__ import annotations

import argparse
import resource
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from envs.sandbox import pool as pools
from envs.sandbox import sweeper
from envs.sandbox.container import create_container, remove_container, remove_many
from envs.sandbox.docker import DockerSandbox
from envs.sandbox.engine import client, engine_available
from envs.sandbox.images import ensure_image
from envs.sandbox.protocol import Limits
from envs.sandbox.shell import SHELL_INIT, frame_command

LIMITS = Limits(memory_mb=256, pids=128, cpus=1.0)
RAW_LINE = frame_command("echo hi", "RAWM")  # the harness's own framing, built once


def _raw_open(cid: str, user: str) -> socket.SocketIO:
    """A second bash in the container on its own exec socket, answered once (so runc's exec
    start-up is not inside the timed loop, as the harness's shells are started in advance)."""
    api = client().api
    ex = api.exec_create(cid, ["bash", "--noprofile", "--norc"], stdin=True, stdout=True, stderr=True,
                         tty=False, user=user)["Id"]
    conn = api.exec_start(ex, socket=True)  # a SocketIO: kept, or its finaliser closes the socket
    conn._sock.settimeout(60)
    conn._sock.sendall(SHELL_INIT)
    _raw_loop(conn, 0.0, None)
    return conn


def _raw_loop(conn: socket.SocketIO, seconds: float, start: threading.Barrier | None) -> int:
    """The persistent-shell loop written bare against the Docker socket; returns commands done
    (at least one)."""
    sock = conn._sock
    buf = bytearray()
    n = 0
    if start is not None:
        start.wait()
    stop = time.monotonic() + seconds
    while n == 0 or time.monotonic() < stop:
        sock.sendall(RAW_LINE)
        out, err = bytearray(), bytearray()
        while True:
            while len(buf) >= 8 and len(buf) >= 8 + (size := int.from_bytes(buf[4:8], "big")):
                (out if buf[0] == 1 else err).extend(buf[8:8 + size])
                del buf[:8 + size]
            if out.endswith(b"\n") and b"\nRAWM" in out and err.endswith(b"\nRAWM\n"):
                break
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("raw shell closed")
            buf += chunk
        n += 1
    return n


def _harness_loop(sb: DockerSandbox, seconds: float, start: threading.Barrier) -> int:
    n = 0
    start.wait()
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        r = sb.exec("echo hi")
        if r.stdout != "hi\n":
            raise RuntimeError(f"unexpected output {r.stdout!r}")
        n += 1
    return n


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _rate(fn, args_list: list[tuple], seconds: float) -> tuple[float, float]:
    """(commands per second, this process's CPU microseconds per command) of `fn` run by one
    thread per args tuple, started together."""
    start = threading.Barrier(len(args_list) + 1)
    with ThreadPoolExecutor(len(args_list)) as ex:
        futs = [ex.submit(fn, *a, seconds, start) for a in args_list]
        start.wait()
        cpu0 = _cpu_s()
        n = sum(f.result(timeout=seconds + 120) for f in futs)
        return n / seconds, 1e6 * (_cpu_s() - cpu0) / max(n, 1)


def percentile(xs: list[float], q: float) -> float:
    """The q-quantile of `xs` (0 <= q <= 1): the sample nearest it, no interpolation."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def acquire_latency(image: str, n: int = 40, size: int = 8) -> dict:
    """Warm acquire: wait until the pool is full again, then time one acquire (then close it)."""
    pool = pools.get_pool(image, LIMITS, pool_size=size)
    times = []
    for _ in range(n):
        deadline = time.monotonic() + 60
        while pool.stats()["ready"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.perf_counter()
        sb = pool.acquire(timeout=60)
        times.append(time.perf_counter() - t0)
        sb.close()
    return {"acquire_p50_ms": round(1000 * statistics.median(times), 3),
            "acquire_p99_ms": round(1000 * percentile(times, 0.99), 3), "acquires": n}


def create_rate(image: str, n: int = 24, threads: int = 8) -> dict:
    """Containers created and started per second by `threads` threads (the daemon's limit)."""
    labels = sweeper.labels()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        ids = list(ex.map(lambda _: create_container(image, LIMITS, labels), range(n)))
    took = time.perf_counter() - t0
    remove_many(ids)
    return {"create_per_s": round(n / took, 2), "create_threads": threads, "created": n}


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench sandbox")
    ap.add_argument("--counts", default="1,32,128", help="concurrent sandboxes, comma-separated")
    ap.add_argument("--seconds", type=float, default=1.5, help="per measurement")
    ap.add_argument("--rounds", type=int, default=8, help="raw/harness pairs per count")
    args = ap.parse_args(argv)
    if not engine_available():
        raise SystemExit("no Docker engine answers: run scripts/setup.sh (as root) first")
    image = ensure_image("sandbox")
    counts = [int(c) for c in args.counts.split(",")]
    result: dict = {"image": image, "seconds": args.seconds, "rounds": args.rounds}
    result.update(create_rate(image))
    result.update(acquire_latency(image))
    pool = pools.get_pool(image, LIMITS, pool_size=max(counts))
    for n in counts:
        held = [pool.acquire(timeout=600) for _ in range(n)]
        try:
            with ThreadPoolExecutor(min(n, 32)) as ex:
                socks = list(ex.map(lambda sb: _raw_open(sb.id, sb.user), held))
            raw, harness = [], []
            try:
                # Short adjacent pairs in alternating order: both sides see the same machine
                # (other jobs' load swings over seconds), neither always goes first.
                for i in range(args.rounds):
                    pair = [(raw, _raw_loop, [(s,) for s in socks]), (harness, _harness_loop, [(sb,) for sb in held])]
                    for out, fn, fn_args in pair[:: 1 if i % 2 == 0 else -1]:
                        out.append(_rate(fn, fn_args, args.seconds))
            finally:
                for conn in socks:
                    conn._sock.close()
                    conn.close()
        finally:
            for sb in held:
                sb.close()
        result[f"raw_cmds_per_s_{n}"] = round(statistics.mean(r for r, _ in raw), 1)
        result[f"harness_cmds_per_s_{n}"] = round(statistics.mean(h for h, _ in harness), 1)
        # The median of per-pair ratios: robust to other jobs' load swinging between pairs.
        result[f"harness_vs_raw_{n}"] = round(statistics.median(h[0] / r[0] for h, r in zip(harness, raw)), 3)
        result[f"raw_cpu_us_per_cmd_{n}"] = round(statistics.median(c for _, c in raw), 1)
        result[f"harness_cpu_us_per_cmd_{n}"] = round(statistics.median(c for _, c in harness), 1)
    pool.shutdown()
    top = max(counts)
    result["goal_harness_ge_0.8x_raw_at_max"] = result[f"harness_vs_raw_{top}"] >= 0.8
    result["goal_acquire_p50_lt_20ms"] = result["acquire_p50_ms"] < 20
    return result
