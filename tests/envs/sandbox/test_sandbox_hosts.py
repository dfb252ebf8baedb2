"""Sandboxes on several Docker engines: placement by image affinity and load, images made
available where they are needed, dead engines skipped, cleanup on every engine.

Two extra engines on this machine (scripts/docker2.sh: docker2 and docker3, their own data and
sockets, started here when not running and stopped at the end) stand in for remote hosts; no
other process uses them, so their loads are exactly what the tests put there.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import textwrap
import time
import uuid

import pytest

from envs.sandbox import container, engine, images, placement, pool, sweeper
from envs.sandbox.engine import client, engine_available
from envs.sandbox.pool import open_sandbox
from envs.sandbox.protocol import Limits, SandboxError
from envs.swe.instances import resolve_image
from tests.cli import REPO
from tests.ready import start_ready

SCRIPT = REPO / "scripts" / "docker2.sh"
D2, D3 = "unix:///run/openclaw-docker2.sock", "unix:///run/openclaw-docker3.sock"
SMALL = Limits(memory_mb=256, pids=64)

pytestmark = [
    pytest.mark.serial,  # starts and kills engines, and measures each engine's load: alone, after the parallel run
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="starting extra Docker engines needs root"),
    pytest.mark.skipif(not engine_available(), reason="no Docker engine answers (scripts/setup.d/10-docker.sh starts one)"),
]


def _engine(cmd: str, name: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), cmd, name], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def sandbox_image():
    """docker2 and docker3 running, each with the sandbox image (copied from the main engine
    once: their data stays between runs). Yields the image's tag."""
    started = []
    for name in ("docker2", "docker3"):
        if _engine("status", name).returncode != 0:
            r = _engine("start", name)
            assert r.returncode == 0, r.stdout + r.stderr
            started.append(name)
    engine.set_hosts(None)
    tag = images.ensure_image("sandbox")
    for url in (D2, D3):
        if not images.image_exists(tag, url):
            images.copy_image(tag, engine.LOCAL, url)
    yield tag
    engine.set_hosts(None)
    for name in started:
        _engine("stop", name)


@pytest.fixture
def hosts(sandbox_image):
    """Sets the engines (and the cap) for one test; afterwards every pool is shut down and the
    placement counts are back to zero, so tests do not see each other's containers."""
    def use(urls: list[str], cap: int | None = None) -> None:
        engine.set_hosts(urls)
        placement.configure(cap)

    yield use
    pool.shutdown_all()
    deadline = time.monotonic() + 60
    while any(placement.load(u) for u in (D2, D3)) and time.monotonic() < deadline:
        time.sleep(0.2)
    engine.set_hosts(None)
    placement.configure(None)


def _tag_on(url: str, image: str) -> str:
    """A new tag of `image` on engine `url` only (as an image loaded on one host)."""
    repo, tag = "openclaw-test/affinity", uuid.uuid4().hex[:12]
    client(url).images.get(image).tag(repo, tag)
    return f"{repo}:{tag}"


def _open(image: str, n: int) -> list:
    """n sandboxes one after another (pool_size=0: each is placed when asked for)."""
    return [open_sandbox(image, SMALL, pool_size=0) for _ in range(n)]


@pytest.mark.parametrize("holder", [D2, D3])
def test_sandbox_goes_to_the_engine_that_has_its_image(hosts, sandbox_image, holder):
    image = _tag_on(holder, sandbox_image)
    hosts([D2, D3])
    try:
        boxes = _open(image, 3)
        assert [b.engine for b in boxes] == [holder] * 3  # the other engine is emptier, but lacks the image
        assert all(b.exec("echo ok").stdout == "ok\n" for b in boxes)
        assert not images.image_exists(image, D3 if holder == D2 else D2)  # nothing was copied
        # A SWE-bench record whose image is loaded on one host only is found there.
        assert resolve_image({"instance_id": "someone__lib-1", "repo": "someone/lib", "image_name": image}) == image
        for b in boxes:
            b.close()
    finally:
        client(holder).images.remove(image)


def test_least_loaded_engine_when_both_have_the_image(hosts, sandbox_image):
    from envs.sandbox.container import create_container, remove_container

    # A crashed run's leftover on D3 (its process is gone, its container still runs) is no load.
    dead = subprocess.Popen(["true"])
    dead.wait()
    leftover = create_container(sandbox_image, SMALL, {**sweeper.labels(), sweeper.L_RUN: "crashed-run",
                                                       sweeper.L_PID: str(dead.pid)}, url=D3)
    hosts([D2, D3])
    try:
        assert placement.load(D3) == 0
        boxes = _open(sandbox_image, 4)
    finally:
        remove_container(leftover, D3)
    assert [b.engine for b in boxes] == [D2, D3, D2, D3]
    assert (placement.load(D2), placement.load(D3)) == (2, 2)
    for url in (D2, D3):  # each container exists on its own engine only
        ids = {c["Id"] for c in sweeper.containers(sweeper.run_id(), url)}
        assert {b.id for b in boxes if b.engine == url} <= ids
        assert not {b.id for b in boxes if b.engine != url} & ids
    boxes[0].close()
    boxes[2].close()  # D2 empties: the next two go there
    deadline = time.monotonic() + 30
    while placement.load(D2) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [b.engine for b in _open(sandbox_image, 2)] == [D2, D2]


def test_image_on_no_engine_is_built_then_copied_where_the_sandbox_goes(hosts, sandbox_image, tmp_path):
    note = uuid.uuid4().hex
    (tmp_path / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\nCOPY note.txt /opt/note.txt\n")
    (tmp_path / "note.txt").write_text(note)
    hosts([D2, D3], cap=1)  # one container per engine before the other engine is preferred
    tag = images.build_image(tmp_path, base=sandbox_image, name=f"test-{note[:8]}")
    try:
        assert images.image_exists(tag, D2) and not images.image_exists(tag, D3)  # built on the primary
        boxes = _open(tag, 2)
        assert [b.engine for b in boxes] == [D2, D3]
        assert images.image_exists(tag, D3)  # copied there for the second sandbox
        assert [b.exec("cat /opt/note.txt").stdout for b in boxes] == [note, note]
        for b in boxes:
            b.close()
        pool.shutdown_all()
    finally:
        for url in (D2, D3):
            if images.image_exists(tag, url):
                client(url).images.remove(tag, force=True)


def test_dead_engine_is_skipped_with_a_warning(hosts, sandbox_image, caplog):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    hosts([dead, D2])
    with caplog.at_level(logging.WARNING, logger="envs.sandbox.engine"):
        boxes = _open(sandbox_image, 2)
    assert [b.engine for b in boxes] == [D2, D2]
    warned = [r.getMessage() for r in caplog.records if dead in r.getMessage()]
    assert warned and "does not answer" in warned[0] and "Connection refused" in warned[0]
    assert len(warned) == 1  # once, not once per sandbox
    hosts([dead])
    with pytest.raises(SandboxError, match="no Docker engine answers"):
        open_sandbox(sandbox_image, Limits(memory_mb=128), pool_size=0, acquire_timeout=20)


def test_another_kernels_clock_still_kills_only_the_timed_out_command(hosts, sandbox_image, monkeypatch):
    import envs.sandbox.docker as docker_backend

    monkeypatch.setattr(docker_backend, "_BOOT_ID", "another-kernel")  # as if the engine were remote
    hosts([D2])
    (box,) = _open(sandbox_image, 1)
    assert -100 < box._tick_offset <= 0  # measured from the engine's uptime: here the same clock
    box.exec("sleep 300 >/dev/null 2>&1 & echo $! > /tmp/bg")
    time.sleep(0.5)  # the offset errs early by the round trip: older jobs are safe
    r = box.exec("sleep 60", timeout=1.0)
    assert r.timed_out and r.duration_s < 15
    assert box.exec("kill -0 $(cat /tmp/bg) && echo alive").stdout == "alive\n"
    assert "sleep 60" not in box.exec("ps -eo args").stdout
    box.close()


# A run that opens sandboxes on both engines, says READY <run id>, then waits to be signalled.
RUNNER = textwrap.dedent("""
    import sys, time
    from envs.sandbox import engine
    from envs.sandbox.pool import open_sandbox
    from envs.sandbox.protocol import Limits
    from envs.sandbox.sweeper import run_id
    engine.set_hosts(sys.argv[2:])
    held = [open_sandbox(sys.argv[1], Limits(memory_mb=256, pids=64), pool_size=0) for _ in range(4)]
    assert sorted(b.engine for b in held) == sorted(sys.argv[2:] * 2), [b.engine for b in held]
    print("READY", run_id(), flush=True)
    time.sleep(600)
""")


def _left(run: str) -> dict[str, int]:
    return {url: len(sweeper.containers(run, url)) for url in (D2, D3)}


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_containers_on_every_engine_are_cleaned_up(hosts, sandbox_image, how):
    proc, (run,) = start_ready(RUNNER, sandbox_image, D2, D3, within=180)
    try:
        assert _left(run) == {D2: 2, D3: 2}
        proc.send_signal(getattr(signal, how))
        proc.wait(timeout=120)
        if how == "SIGKILL":  # nothing ran in the dead process: the next run's sweep removes them
            hosts([D2, D3])
            removed = sweeper.sweep()
            assert len(removed) >= 4
        deadline = time.monotonic() + 60
        while any(_left(run).values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _left(run) == {D2: 0, D3: 0}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for url in (D2, D3):
            container.remove_many([c["Id"] for c in sweeper.containers(run, url)], url)


def test_sandbox_on_an_engine_that_dies_is_an_infra_error(hosts, sandbox_image):
    from envs.toolcall.env import ToolCallEnv

    hosts([D3])
    env = ToolCallEnv(n_problems=1, sandbox="docker")
    box = None
    try:
        env.reset(options={"task_id": "gen-00000"})
        call = env.task.oracle[0]
        assert env.step(call)[4]["status"] == "ok"
        (box,) = _open(sandbox_image, 1)
        assert _engine("stop", "docker3").returncode == 0
        _, _, _, truncated, info = env.step(call)
        assert info["status"] == "infra_error" and truncated and info["outcome"] is None
        with pytest.raises(SandboxError, match="openclaw-docker3"):
            box.exec("echo hi")
    finally:
        env.close()
        if box is not None:
            box.close()
        assert _engine("start", "docker3").returncode == 0
    assert engine.live_hosts(fresh=True) == [D3]  # back for the next run
    # What could not be removed while the engine was down is this run's: the exit cleanup's.
    sweeper.remove_all_mine()
    assert not sweeper.containers(sweeper.run_id(), D3)
