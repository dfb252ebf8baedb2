"""Disk caps that hold on an ext4 host: a sandbox writing past Limits.disk_mb is stopped with a
clear status, quickly, and the host's disk does not fill (both backends)."""
from __future__ import annotations

import shutil
import time

import pytest

from envs.sandbox import Limits, SandboxLimitError, open_sandbox
from envs.sandbox.engine import engine_available

pytestmark = pytest.mark.serial  # they measure the host's free disk, which parallel tests also use

CAP = Limits(memory_mb=1024, disk_mb=256, pids=64)
BACKENDS = [pytest.param("bwrap", marks=pytest.mark.bwrap),
            pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.skipif(
                not engine_available(), reason="no Docker engine answers")])]


def _open(backend: str, limits: Limits = CAP):
    return open_sandbox(backend, limits=limits, **({"pool_size": 1} if backend == "docker" else {}))


def _free_mb() -> int:
    return shutil.disk_usage("/").free >> 20


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("write", ["dd if=/dev/zero of=/tmp/big bs=1M count=3072", "fallocate -l 3G /tmp/big"])
def test_a_3gb_write_against_a_256mb_cap_is_stopped(backend, write):
    sb = _open(backend)
    try:
        free, t0 = _free_mb(), time.monotonic()
        r = sb.exec(f"{write}; echo rc=$?", timeout=60)
        took = time.monotonic() - t0
        assert "rc=153" in r.stdout or "No space left" in r.stderr  # SIGXFSZ (128+25) or a full tmpfs
        assert took < 10, f"{took:.1f} s"
        assert int(sb.exec("du -sm /tmp | cut -f1").stdout) <= 260  # the file stopped at the cap (+ a folder block)
        assert free - _free_mb() < 512  # other processes write too; 3 GB would show
    finally:
        sb.close()


@pytest.mark.docker
@pytest.mark.skipif(not engine_available(), reason="no Docker engine answers")
def test_docker_many_files_past_the_cap_stop_the_sandbox():
    sb = _open("docker")
    try:
        t0 = time.monotonic()
        with pytest.raises(SandboxLimitError, match="wrote past its disk cap"):
            # each file under the per-file cap, 3 GB in all: the watchdog stops the container
            sb.exec("for i in $(seq 12); do dd if=/dev/zero of=/tmp/f$i bs=1M count=250 status=none; done; sleep 30",
                    timeout=60)
        assert time.monotonic() - t0 < 20
    finally:
        sb.close()


@pytest.mark.docker
@pytest.mark.skipif(not engine_available(), reason="no Docker engine answers")
def test_a_terminal_episode_past_the_disk_cap_is_the_agents_failure():
    from envs.terminal.env import TerminalEnv
    from envs.tool_calls import render_tool_call

    env = TerminalEnv(sandbox="docker", pool_size=1)
    env.limits = Limits(memory_mb=1024, disk_mb=64, pids=64)
    try:
        env.reset(options={"task_id": "merge-numbers"})
        fill = "for i in 1 2 3 4; do dd if=/dev/zero of=/tmp/f$i bs=1M count=60 status=none; done; sleep 20"
        _, reward, term, trunc, info = env.step(render_tool_call("bash", {"command": fill, "timeout": 60}))
        # not infra_error (which leaves the batch): the agent's doing, an ended episode with the fail outcome
        assert info["status"] == "env_error" and term and not trunc, info
        assert reward == -1.0 and info["outcome"] == -1.0
        assert "wrote past its disk cap" in info["next_state"].content
    finally:
        env.close()


@pytest.mark.bwrap
def test_bwrap_tmpfs_writes_past_memory_say_so():
    sb = _open("bwrap", Limits(memory_mb=128, disk_mb=256, pids=64))
    try:
        if sb._cgroup is None:
            pytest.skip("no writable cgroup hierarchy: tmpfs writes hit the disk cap, not a memory limit")
        r = sb.exec("dd if=/dev/zero of=/tmp/big bs=1M count=200 status=none", timeout=60)
        assert r.exit_code == -9 and "[memory limit: the sandbox reached its 128 MB" in r.stderr
    finally:
        sb.close()


@pytest.mark.bwrap
def test_bwrap_sandboxes_cannot_create_user_namespaces(tmp_path):
    sb = _open("bwrap")
    try:
        r = sb.exec("unshare -U true; echo rc=$?; python3 -c 'import threading; t = threading.Thread(target=print); "
                    "t.start(); t.join()' && echo threads-ok")
        assert "rc=1" in r.stdout and "Operation not permitted" in r.stderr
        assert "threads-ok" in r.stdout  # clone3 refused with ENOSYS: libc falls back, threads still start
        # the verifier's root processes enter through the same path: refused there too
        v = sb.verify(str(tmp_path), "unshare -U true; echo $? > /logs/verifier/reward.txt", sb.workdir, 30)
        assert v.reward_text is not None and v.reward_text.strip() == "1", v.log
        assert "Operation not permitted" in v.log
    finally:
        sb.close()
