"""`python -m experiments.bench fork`: what forking an episode costs, and what a shared trunk saves.

Terminal: a TerminalEnv per sandbox backend (bwrap, and docker where an engine answers) runs one
step that writes 100 MiB (96 files of 1 MiB and 1024 of 4 KiB, random bytes) into its work dir;
then `env.fork()` is timed `--forks` times, each fork closed before the next, and the sandbox a
fork starts in made ready in between, as in a run where forks are taken ahead of demand (bwrap:
the spare sandbox started after each fork; Docker: the warm pool refilled). Side by side: the time
of `env.reset()` on the same task (`fork_over_reset`: a fork against starting the episode over,
which also loses its turns). Extra
disk and memory per fork: with `--hold` forks alive at once, the growth of the host's tmpfs
files (Shmem: bwrap's trees live there) and the drop in free space of the file system Docker
writes to (its data root; "/" for bwrap), divided by `--hold`. A fork's processes (a shell, the
sandbox's holder: a few MiB) are not counted: the host-wide figures for them drown in other jobs.
Toolcall (after code wrote a file; its sandbox is bwrap, its spare ready as above) and chat_sim (after three turns): fork latency, and for
chat_sim the bytes a fork allocates (tracemalloc).
GUI (MiniWoB `login-user` after two actions: user name and password typed; needs Chromium and
chromedriver, else one `gui: skipped` line): a fork replays the episode in a page of its own.
`gui_fork_*`: the env as a run makes it (its own browser pool), so each fork starts its own
Chromium; `gui_fork_shared_*`: a pool passed in with an idle browser (the previous fork's,
released when it closed), so the fork only replays.

Trunk sharing, from a run's turns.jsonl (`--turns`; default: a chat_sim eval run with the tiny
model, made here): an episode's turns sampled r_1..r_T tokens. K independent episodes sample
K * sum(r); a trunk forked into K branches at turn t samples sum(r_<t) once and the rest K times
(each branch taken as long as the recorded continuation). saved = 1 - branched / independent,
averaged over episodes, at t = the middle turn (`_mid`) and at the last turn (`_last`: every turn
but the last shared). Turns are counted from 0.
Goal: a terminal fork under 250 ms p50 (`goal_met`, on every backend measured).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Callable

from envs.base import AgentEnv
from envs.tool_calls import render_tool_call
from experiments.bench.sandbox import percentile

GOAL_S = 0.25
CASES = ("terminal", "toolcall", "chat_sim", "gui", "trunk")
WRITE_100MIB = ("mkdir -p big small && for i in $(seq 96); do head -c 1048576 /dev/urandom > big/f$i; done && "
                "head -c 4194304 /dev/urandom | split -b 4096 -a 4 - small/s && du -s --block-size=1M big small")


def _ms(x: float) -> float:
    return round(1000 * x, 1)


def _time_forks(env: AgentEnv, n: int, between: Callable[[], None]) -> list[float]:
    times = []
    for _ in range(n):
        between()
        t0 = time.perf_counter()
        fork = env.fork()
        times.append(time.perf_counter() - t0)
        fork.close()
    return times


def _shmem() -> int:
    """Bytes in tmpfs files on the host (bwrap's writable trees live there)."""
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("Shmem:"))


def _free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _held_cost(env: AgentEnv, hold: int, disk_path: str, between: Callable[[], None]) -> tuple[float, float]:
    """(extra MiB of memory, extra MiB of disk) per fork while `hold` forks are alive."""
    between()
    time.sleep(1.0)
    mem0, disk0 = _shmem(), _free_bytes(disk_path)
    forks = []
    try:
        for _ in range(hold):
            between()
            forks.append(env.fork())
        time.sleep(1.0)  # let the engine's writes reach the file system's counters
        mem1, disk1 = _shmem(), _free_bytes(disk_path)
    finally:
        for f in forks:
            f.close()
    return round((mem1 - mem0) / hold / 2**20, 1), round((disk0 - disk1) / hold / 2**20, 1)


def terminal(backend: str, n: int, hold: int) -> dict:
    from envs.terminal.env import TerminalEnv

    from envs.sandbox import bwrap

    between, disk_path = (lambda: bwrap.wait_spares(30.0)), "/"
    if backend == "docker":
        from envs.sandbox import pool as pools
        from envs.sandbox.engine import client

        between, disk_path = (lambda: pools.wait_warm(120.0)), client().info()["DockerRootDir"]
    env = TerminalEnv(sandbox=backend, pool_size=2)
    try:
        task = "json-deep-merge"
        opens = []
        for _ in range(max(3, n // 4)):  # a fresh episode's sandbox: what a fork saves starting over
            between()
            t0 = time.perf_counter()
            env.reset(options={"task_id": task})
            opens.append(time.perf_counter() - t0)
        _, _, _, _, info = env.step(render_tool_call("bash", {"command": WRITE_100MIB, "timeout": 120}))
        written = info["next_state"].data.get("stdout", "")
        if not written.strip().endswith("small") or info["status"] != "ok":
            raise RuntimeError(f"writing 100 MiB in the {backend} sandbox failed: {info['next_state'].content[:300]}")
        times = _time_forks(env, n, between)
        mem, disk = _held_cost(env, hold, disk_path, between)
    finally:
        env.close()
    p50 = statistics.median(times)
    return {
        f"terminal_{backend}_fork_p50_ms": _ms(p50), f"terminal_{backend}_fork_p99_ms": _ms(percentile(times, 0.99)),
        f"terminal_{backend}_reset_p50_ms": _ms(statistics.median(opens)),
        f"terminal_{backend}_fork_over_reset": round(p50 / statistics.median(opens), 2),
        f"terminal_{backend}_memory_mib_per_fork": mem, f"terminal_{backend}_disk_mib_per_fork": disk,
    }


def toolcall(n: int) -> dict:
    from envs.sandbox import bwrap
    from envs.toolcall.env import ToolCallEnv

    env = ToolCallEnv(code_timeout=10.0)
    try:
        env.reset(options={"task_id": env.task_ids()[0]})
        env.step(render_tool_call("python", {"code": "open('n.txt', 'w').write('x' * 100000)"}))
        times = _time_forks(env, n, lambda: bwrap.wait_spares(30.0))
    finally:
        env.close()
    return {"toolcall_fork_p50_ms": _ms(statistics.median(times)), "toolcall_fork_p99_ms": _ms(percentile(times, 0.99))}


def chat_sim(n: int) -> dict:
    from envs.chat_sim.env import ChatSimEnv

    env = ChatSimEnv()
    env.reset(options={"task_id": env.task_ids()[0]})
    for i in range(3):
        env.step(f"Attempt {i}: the answer is {i * 7}.")
    times = _time_forks(env, n, lambda: None)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fork = env.fork()
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    fork.close()
    env.close()
    return {"chat_sim_fork_p50_ms": _ms(statistics.median(times)), "chat_sim_fork_p99_ms": _ms(percentile(times, 0.99)),
            "chat_sim_fork_kib": round(size / 1024, 1)}


GUI_TASK = "login-user"


def _chromium_missing() -> str:
    """Why the GUI case cannot run here ('' where it can)."""
    from envs.gui.browser import configure_env

    configure_env()
    missing = [os.environ[k] for k in ("MINIWOB_CHROME_BINARY", "MINIWOB_CHROMEDRIVER") if not os.access(os.environ[k], os.X_OK)]
    return f"skipped: no {' or '.join(missing)} (install chromium and chromedriver)" if missing else ""


def gui(n: int) -> dict:
    from envs.gui.browser import BrowserPool
    from envs.gui.env import GuiEnv

    out = {}
    shared = BrowserPool(max_idle=1)
    try:
        for name, pool in (("gui_fork", None), ("gui_fork_shared", shared)):
            env = GuiEnv(max_turns=8, families=[GUI_TASK], pool=pool)
            try:
                env.reset(seed=5, options={"task_id": GUI_TASK})
                for _ in range(2):  # the user name, then the password typed
                    *_, info = env.step(env.oracle_action())
                    if info["status"] != "ok":
                        raise RuntimeError(f"GUI step failed: {info['next_state'].content[:300]}")
                if pool is not None:  # an idle browser for the first fork (later ones take the previous fork's)
                    pool.release(pool.acquire())
                times = _time_forks(env, n, lambda: None)
            finally:
                env.close()
            out |= {f"{name}_p50_ms": _ms(statistics.median(times)), f"{name}_p99_ms": _ms(percentile(times, 0.99))}
    finally:
        shared.close()
    return out


def _record_run(out: Path) -> Path:
    """A small recorded run (the docs' chat_sim example with the tiny model)."""
    cmd = [sys.executable, "-m", "experiments.run", "env=chat_sim", "model=tiny", "mode=eval", "steps=1",
           "eval.every=0", f"run_dir={out}"]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"recording a run for trunk sharing failed: {r.stderr.strip()[-500:]}")
    return out / "turns.jsonl"


def trunk_savings(turns_file: Path, k: int) -> dict:
    episodes: dict[str, dict[int, int]] = {}
    for line in turns_file.read_text().splitlines():
        rec = json.loads(line)
        episodes.setdefault(rec["episode_id"], {})[rec["step_index"]] = len(rec["response_ids"])
    mid, last = [], []
    for steps in episodes.values():
        r = [steps[i] for i in sorted(steps)]
        if len(r) < 2 or not sum(r):
            continue
        for t, acc in ((len(r) // 2, mid), (len(r) - 1, last)):
            branched = sum(r[:t]) + k * sum(r[t:])
            acc.append(1 - branched / (k * sum(r)))
    if not mid:
        raise RuntimeError(f"{turns_file} holds no episode of two turns or more")
    return {"trunk_episodes": len(mid), "trunk_k": k, "trunk_turns_mean": round(statistics.mean(len(s) for s in episodes.values()), 2),
            "trunk_tokens_saved_mid": round(statistics.mean(mid), 3), "trunk_tokens_saved_last": round(statistics.mean(last), 3)}


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench fork")
    ap.add_argument("--forks", type=int, default=30, help="forks timed per env")
    ap.add_argument("--hold", type=int, default=4, help="forks alive at once for the disk and memory figures")
    ap.add_argument("--backends", default="bwrap,docker", help="terminal sandbox backends (docker only where an engine answers)")
    ap.add_argument("--turns", default="", help="a run's turns.jsonl for trunk sharing (default: record a small one)")
    ap.add_argument("--k", type=int, default=8, help="branches per fork point for trunk sharing")
    ap.add_argument("--cases", default=",".join(CASES), help=f"what to measure, some of {', '.join(CASES)}")
    args = ap.parse_args(argv)
    cases = set(filter(None, args.cases.split(",")))
    if cases - set(CASES):
        raise SystemExit(f"unknown case(s) {', '.join(sorted(cases - set(CASES)))}; choose from {', '.join(CASES)}")
    result: dict = {}
    for backend in filter(None, args.backends.split(",") if "terminal" in cases else ()):
        if backend == "docker":
            from envs.sandbox.engine import engine_available

            if not engine_available():
                result["terminal_docker"] = "skipped: no Docker engine answers"
                continue
        try:
            result.update(terminal(backend, args.forks, args.hold))
        finally:
            if backend == "docker":
                from envs.sandbox import pool as pools

                pools.shutdown_all()
    if "toolcall" in cases:
        result.update(toolcall(args.forks))
    if "chat_sim" in cases:
        result.update(chat_sim(args.forks))
    if "gui" in cases:
        missing = _chromium_missing()
        result.update({"gui": missing} if missing else gui(args.forks))
    if "trunk" in cases:
        with tempfile.TemporaryDirectory(prefix="forkbench-") as tmp:
            result.update(trunk_savings(Path(args.turns) if args.turns else _record_run(Path(tmp) / "run"), args.k))
    p50s = {k: v for k, v in result.items() if k.startswith("terminal_") and k.endswith("_fork_p50_ms")}
    if p50s:  # the goal is the terminal fork's
        result["goal_met"] = all(v < 1000 * GOAL_S for v in p50s.values())
    return result
