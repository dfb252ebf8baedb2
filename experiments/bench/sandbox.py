"""`python -m experiments.bench sandbox`: the Docker sandbox harness against the bare socket loop.

At each concurrency (default 1, 32, 128) the same containers run `echo hi` in a loop for a few
seconds, two ways, alternated (raw, harness, raw, harness) so both see the same machine:
- raw: a second bash per container opened straight on the exec socket, the same command line
  (eval + stdout and stderr end markers), frames parsed inline: the floor of this protocol;
- harness: `DockerSandbox.exec` (captures, caps, timeouts, result objects).
Also: warm-pool acquire latency (p50/p99, pool refilled between acquires) and the daemon's
container create+start rate with several threads.
Goals (issue 4): harness >= 0.8x raw at 128; warm acquire p50 < 20 ms.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from envs.sandbox import pool as pools
from envs.sandbox import sweeper
from envs.sandbox.docker import DockerSandbox, create_container, remove_container
from envs.sandbox.engine import client, engine_available
from envs.sandbox.images import ensure_image
from envs.sandbox.protocol import Limits

LIMITS = Limits(memory_mb=256, pids=128, cpus=1.0)
RAW_LINE = b"{ eval $'echo hi'\n} </dev/null; printf '\\nRAWM%d\\n' \"$?\"; printf '\\nRAWM\\n' >&2\n"


def _raw_loop(cid: str, user: str, seconds: float, start: threading.Barrier) -> int:
    """The persistent-shell loop written bare against the Docker socket; returns commands done."""
    api = client().api
    ex = api.exec_create(cid, ["bash", "--noprofile", "--norc"], stdin=True, stdout=True, stderr=True,
                         tty=False, user=user)["Id"]
    resp = api.exec_start(ex, socket=True)
    sock = resp._sock
    sock.settimeout(30)
    buf = bytearray()
    n = 0
    start.wait()
    stop = time.monotonic() + seconds
    try:
        while time.monotonic() < stop:
            sock.sendall(RAW_LINE)
            out, err = bytearray(), bytearray()
            while not (out.endswith(b"\n") and b"\nRAWM" in out and err.endswith(b"\nRAWM\n")):
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
    finally:
        sock.close()
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


def _rate(fn, args_list: list[tuple], seconds: float) -> float:
    """Commands per second of `fn` run by one thread per args tuple, started together."""
    start = threading.Barrier(len(args_list))
    with ThreadPoolExecutor(len(args_list)) as ex:
        futs = [ex.submit(fn, *a, seconds, start) for a in args_list]
        return sum(f.result(timeout=seconds + 120) for f in futs) / seconds


def _percentile(xs: list[float], q: float) -> float:
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
            "acquire_p99_ms": round(1000 * _percentile(times, 0.99), 3), "acquires": n}


def create_rate(image: str, n: int = 24, threads: int = 8) -> dict:
    """Containers created and started per second by `threads` threads (the daemon's limit)."""
    labels = sweeper.labels()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        ids = list(ex.map(lambda _: create_container(image, LIMITS, labels), range(n)))
    took = time.perf_counter() - t0
    sweeper.remove_many(ids)
    return {"create_per_s": round(n / took, 2), "create_threads": threads, "created": n}


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench sandbox")
    ap.add_argument("--counts", default="1,32,128", help="concurrent sandboxes, comma-separated")
    ap.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    ap.add_argument("--rounds", type=int, default=2, help="raw/harness alternations per count")
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
            raw, harness = [], []
            for _ in range(args.rounds):
                raw.append(_rate(_raw_loop, [(sb.id, sb.user) for sb in held], args.seconds))
                harness.append(_rate(_harness_loop, [(sb,) for sb in held], args.seconds))
        finally:
            for sb in held:
                sb.close()
        r, h = statistics.mean(raw), statistics.mean(harness)
        result[f"raw_cmds_per_s_{n}"] = round(r, 1)
        result[f"harness_cmds_per_s_{n}"] = round(h, 1)
        result[f"harness_vs_raw_{n}"] = round(h / r, 3)
    pool.shutdown()
    top = max(counts)
    result["goal_harness_ge_0.8x_raw_at_max"] = result[f"harness_vs_raw_{top}"] >= 0.8
    result["goal_acquire_p50_lt_20ms"] = result["acquire_p50_ms"] < 20
    return result
