"""`python -m experiments.bench terminal`: oracle episodes per second of the Terminal env on Docker.

At each concurrency (default 1, 32, 128) the rollout Runner drives that many TerminalEnvs with
the OracleActor over the bundled setup.sh tasks (each episode: a warm sandbox, setup, the
solution, the tests), after the warm pool has been filled to that size, so container creation
happens ahead of demand as in a run. Each env counts the wall time its thread spends in sandbox
calls (pool acquire, exec, copy in); the rest of the episodes' time is the harness: the env's
parsing and rendering, the runner, the actor, thread scheduling.
  sandbox_share = sum of sandbox time / sum of episode durations;  overhead = 1 - sandbox_share.
Goal: overhead < 10% at 128.
"""
from __future__ import annotations

import argparse
import asyncio
import time

from agent.actors import OracleActor
from agent.rollout import EpisodeJob, Runner
from envs.base import Status
from envs.sandbox import images, pool as pools
from envs.sandbox.engine import engine_available
from envs.terminal.env import TerminalEnv


def _fill(env: TerminalEnv, n: int, timeout_s: float = 600.0) -> None:
    """Grow the pool of the default image to n ready sandboxes and wait for them."""
    p = pools.get_pool(images.ensure_image("sandbox"), env.limits, pool_size=n, verifier=True)
    end = time.monotonic() + timeout_s
    while p.stats()["ready"] < n and time.monotonic() < end:
        time.sleep(0.2)


def _why(ep) -> str:
    """One line on why an oracle episode did not pass (load on a shared machine: timeouts)."""
    last = ep.turns[-1].next_state if ep.turns else None
    if ep.status != Status.OK or last is None:
        return f"{ep.job.task_id}: {ep.status} {ep.error or ''}"[:200]
    return f"{ep.job.task_id}: {last.content[-160:]!r}"


def run_at(n: int, episodes: int, ids: list[str]) -> dict:
    made: list[TerminalEnv] = []

    def make() -> TerminalEnv:
        env = TerminalEnv(sandbox="docker", pool_size=n)
        made.append(env)
        return env

    _fill(TerminalEnv(sandbox="docker"), n)
    jobs = [EpisodeJob(f"e{i}", ids[i % len(ids)], f"g{i}", i) for i in range(episodes)]
    runner = Runner(make, lambda job: OracleActor(), n_envs=n, progress=False)
    t0 = time.monotonic()
    try:
        eps = asyncio.run(runner.run(jobs))
        wall = time.monotonic() - t0
        sandbox_s = sum(e.sandbox_s for e in made)
    finally:
        runner.close()
    busy = sum(e.duration_s for e in eps)
    failed = [e for e in eps if e.outcome != 1.0]
    return {
        f"failures_{n}": [_why(e) for e in failed[:5]],
        f"episodes_per_s_{n}": round(len(eps) / wall, 2),
        f"passed_{n}": sum(e.outcome == 1.0 for e in eps) / len(eps),
        f"episode_s_mean_{n}": round(busy / len(eps), 3),
        f"sandbox_share_{n}": round(sandbox_s / busy, 3),
        f"overhead_share_{n}": round(1 - sandbox_s / busy, 3),
    }


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench terminal")
    ap.add_argument("--counts", default="1,32,128", help="concurrent episodes, comma-separated")
    ap.add_argument("--episodes", type=int, default=0, help="episodes per count (default max(8, 2n))")
    args = ap.parse_args(argv)
    if not engine_available():
        raise SystemExit("no Docker engine answers: run scripts/setup.sh (as root) first")
    ids = TerminalEnv(sandbox="bwrap").task_ids()  # the setup.sh tasks (no per-task image)
    result: dict = {"tasks": len(ids)}
    try:
        for n in (int(c) for c in args.counts.split(",")):
            result.update(run_at(n, args.episodes or max(8, 2 * n), ids))
    finally:
        pools.shutdown_all()
    return result
