"""Crash safety and scale of the Docker backend: what a killed or interrupted run leaves, and
128 sandboxes at once."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from envs.sandbox.engine import client, engine_available
from envs.sandbox.protocol import Limits
from tests.cli import REPO, sigterm
from tests.ready import start_ready

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not engine_available(), reason="no Docker engine answers (scripts/setup.d/10-docker.sh starts one)"),
]
SMALL = Limits(memory_mb=256, pids=64)

# A runner: opens N sandboxes (warm pool of N), runs a command in each, says READY <run id>, then
# waits (to be signalled; with "ignore-sigint", ignoring SIGINT; with "release", after ending its
# sandboxes as a Ray worker's shutdown does) or, with "exit", returns normally without closing anything.
RUNNER = textwrap.dedent("""
    import signal, sys, time
    if sys.argv[3] == "ignore-sigint":
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup or in a background job
    from envs.sandbox.pool import open_sandbox
    from envs.sandbox.protocol import Limits
    from envs.sandbox.sweeper import run_id
    n = int(sys.argv[1])
    held = [open_sandbox(sys.argv[2], Limits(memory_mb=256, pids=64), pool_size=n) for _ in range(n)]
    assert all(s.exec("echo up").stdout == "up\\n" for s in held)
    if sys.argv[3] == "release":
        from envs.sandbox import release_all
        release_all()
    print("READY", run_id(), flush=True)
    if sys.argv[3] != "exit":
        time.sleep(600)
""")


def _containers(run: str) -> list[dict]:
    return client().api.containers(all=True, filters={"label": f"openclaw.run={run}"})


def _start_runner(image: str, n: int, then: str = "wait") -> tuple[subprocess.Popen, str]:
    proc, (run,) = start_ready(RUNNER, str(n), image, then)
    return proc, run


def _wait_gone(run: str, within: float) -> list[dict]:
    deadline = time.monotonic() + within
    while _containers(run) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _containers(run)


def test_sigkill_leaves_containers_that_the_next_sweep_removes(image):
    from envs.sandbox import sweeper

    proc, run = _start_runner(image, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    left = _containers(run)
    assert len(left) >= 3  # the killed run could not clean up (its warm spares count too)
    # What the next start does. A container whose creation was in flight at the kill appears
    # only after a first sweep: a later sweep (the next start's) removes it.
    deadline = time.monotonic() + 30
    while _containers(run) and time.monotonic() < deadline:
        sweeper.sweep()
        time.sleep(1)
    assert _containers(run) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_leaves_nothing(image, sig):
    proc, run = _start_runner(image, 3)
    assert len(_containers(run)) >= 3
    proc.send_signal(sig)
    proc.wait(timeout=60)
    assert proc.returncode != 0  # the signal still ended it (handlers chain to the previous ones)
    assert _wait_gone(run, 5) == []


def test_a_run_that_ignores_sigint_keeps_its_sandboxes(image):
    proc, run = _start_runner(image, 3, then="ignore-sigint")
    try:
        proc.send_signal(signal.SIGINT)
        time.sleep(3)
        assert proc.poll() is None and len(_containers(run)) >= 3  # still running, sandboxes and all
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait_gone(run, 5) == []


def test_normal_exit_leaves_nothing(image):
    proc, run = _start_runner(image, 3, then="exit")
    proc.wait(timeout=60)
    assert proc.returncode == 0
    assert _wait_gone(run, 5) == []


def test_release_all_ends_a_live_process_sandboxes(image):
    """envs.sandbox.release_all (a Ray worker's shutdown) removes the pools' containers, the
    process living on."""
    proc, run = _start_runner(image, 2, then="release")
    try:
        # a refill in flight when release_all ran is removed as soon as its creation returns
        # (the daemon may take longer than release_all waits for it when CI loads the host)
        assert proc.poll() is None and _wait_gone(run, 30) == []
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_sweep_spares_live_runs_and_honours_deadlines(image):
    from envs.sandbox import sweeper
    from envs.sandbox.container import create_container, remove_container

    proc, run = _start_runner(image, 1)
    # Two containers of another run whose owner (this process) is alive: one past its deadline.
    expired = create_container(image, SMALL, {**sweeper.labels(deadline_s=-1), sweeper.L_RUN: "expired-run"})
    alive = create_container(image, SMALL, {**sweeper.labels(), sweeper.L_RUN: "alive-run"})
    try:
        sweeper.sweep()
        exists = {c["Id"] for c in client().api.containers(all=True, filters={"label": sweeper.L_RUN})}
        assert expired not in exists and alive in exists  # (or another run's sweep removed it)
        assert _containers(run)  # owner alive: kept
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        remove_container(alive)
    assert _wait_gone(run, 5) == []


def test_a_create_whose_answer_times_out_leaves_no_container(image, monkeypatch):
    import docker
    import requests

    from envs.sandbox import sweeper
    from envs.sandbox.container import create_container
    from envs.sandbox.protocol import SandboxError

    real = docker.api.client.APIClient.create_container

    def late(self, *args, **kwargs):  # the engine makes it; the answer comes after the client gave up
        real(self, *args, **kwargs)
        raise requests.exceptions.ReadTimeout("read timed out")

    monkeypatch.setattr(docker.api.client.APIClient, "create_container", late)
    labels = {**sweeper.labels(), sweeper.L_RUN: "late-answer-run"}
    with pytest.raises(SandboxError, match="docker create failed"):
        create_container(image, SMALL, labels)
    assert _containers("late-answer-run") == []


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.timeout(900)  # the engine makes 128 containers in ~220 s beside the parallel suite, longer under more load
def test_128_sandboxes_at_once(image):
    from envs.sandbox import pool, sweeper
    from envs.sandbox.pool import open_sandbox

    n = 128
    before = {c["Id"] for c in _containers(sweeper.run_id())}
    held, errors = [], []

    def one(i: int) -> None:
        try:
            s = open_sandbox(image, SMALL, pool_size=16, acquire_timeout=600)
            r = s.exec(f"echo {i} $HOSTNAME")
            assert r.ok and r.stdout.split()[0] == str(i)
            held.append(s)
        except Exception as e:  # collected: one failure must not hide the others
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 660
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not errors, errors[:3]
    assert len(held) == n and len({s.id for s in held}) == n
    assert len(_containers(sweeper.run_id())) >= n  # all 128 alive at once
    for s in held:
        s.close()
    pool.get_pool(image, SMALL).shutdown()
    deadline = time.monotonic() + 60
    while {c["Id"] for c in _containers(sweeper.run_id())} - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not {c["Id"] for c in _containers(sweeper.run_id())} - before


def _by_pid(pid: int) -> list[dict]:
    return client().api.containers(all=True, filters={"label": f"openclaw.pid={pid}"})


# Programs whose Docker pools are first opened in worker threads (the runner's), so the exit
# cleanup's own signal handlers never get installed: SIGTERM must still stop them as Ctrl-C does.
PROGRAMS = {
    "run": ["experiments.run", "env=terminal", "sandbox=docker", "policy=random", "mode=eval", "n_envs=5",
            "env.pool_size=5", "steps=1000", "tasks_per_step=5", "group_size=1", "wandb.mode=disabled",
            "progress=false"],
    "bench": ["experiments.bench", "terminal", "--counts", "5", "--episodes", "5000"],
}


@pytest.mark.slow
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_sigterm_stops_a_program_as_ctrl_c_does(image, program, tmp_path):
    args = PROGRAMS[program] + ([f"run_dir={tmp_path}"] if program == "run" else [])
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while len(_by_pid(proc.pid)) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    up = len(_by_pid(proc.pid))
    time.sleep(3)  # episodes under way
    (_, err), took = sigterm(proc, 60)
    assert up >= 5, "the program never had its sandboxes up"
    assert proc.returncode != 0 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("interrupted:"), err[-2000:]
    assert took < 45, f"took {took:.1f} s to stop"
    deadline = time.monotonic() + 5
    while _by_pid(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _by_pid(proc.pid) == []
