"""Disk caps that hold on an ext4 host: a sandbox writing past Limits.disk_mb is stopped with a
clear status, quickly, and the host's disk does not fill (both backends). Each attack is measured
against the host's free space, sampled every 10 ms while it runs. Docker sandboxes get a file system
of their cap's size (layerfs.py) where this host can mount one; the watchdog's tests force the
fallback (`watchdog_only`) so that it is tested on every host."""
from __future__ import annotations

import os
import shutil
import threading
import time
from contextlib import contextmanager

import pytest

from envs.sandbox import Limits, SandboxLimitError, container, open_sandbox
from envs.sandbox.engine import engine_available, primary

pytestmark = pytest.mark.serial  # they measure the host's free disk, which parallel tests also use

CAP = Limits(memory_mb=1024, disk_mb=256, pids=64)
BACKENDS = [pytest.param("bwrap", marks=pytest.mark.bwrap),
            pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.skipif(
                not engine_available(), reason="no Docker engine answers")])]
# What the host may lose past the cap while an attack runs: other processes writing meanwhile (and
# where the watchdog holds the cap, its reaction time at this
# host's write rate (measured: 50-300 MB), plus room for other processes writing meanwhile.
MAX_HOST_DROP_MB = CAP.disk_mb + 1024
# 8 writers in parallel, each file under the per-file cap, 16 GB in all; and a loop reserving disk
# without writing it (`-n`: fallocate grows no size, so RLIMIT_FSIZE never looks), 13 GB in all.
WRITERS = ("for j in $(seq 8); do (for i in $(seq 8); do dd if=/dev/zero of=/tmp/w${j}_$i bs=1M count=250 "
           "status=none; done) & done; wait")
FALLOCATE_LOOP = ("touch /tmp/r; fallocate -n -l 3G /tmp/r; for i in $(seq 40); do fallocate -l 250M /tmp/f$i; "
                  "done")


@pytest.fixture
def watchdog_only(monkeypatch):
    """Docker sandboxes opened meanwhile get the watchdog, as on a host that cannot mount a file
    system per sandbox."""
    from envs.sandbox import pool

    pool.shutdown_all()  # the warm sandboxes made before have their file systems
    monkeypatch.setitem(container._disk_how, primary(), "forced by the test")
    yield
    pool.shutdown_all()  # nor may the watchdog's outlive the test


def _open(backend: str, limits: Limits = CAP):
    return open_sandbox(backend, limits=limits, **({"pool_size": 1} if backend == "docker" else {}))


def _free_mb() -> int:
    return shutil.disk_usage("/").free >> 20


@contextmanager
def _host_drop():
    """Yields a list that holds, once the block ends, the most free space the host lost (MB)."""
    start, low, done = _free_mb(), [_free_mb()], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            low[0] = min(low[0], _free_mb())

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    drop: list[int] = []
    try:
        yield drop
    finally:
        done.set()
        t.join(timeout=5)
        drop.append(start - low[0])


def _gone(sb) -> bool:
    """Nothing of the sandbox is left on the host (waits for the pool's background removal)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if hasattr(sb, "_holder_pid"):  # bwrap: its holder's mount namespace, tmpfs mounts and all, is gone
            try:
                with open(f"/proc/{sb._holder_pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return True
            except FileNotFoundError:
                return True
        else:
            import docker

            from envs.sandbox.engine import client
            try:
                client(sb.engine).api.inspect_container(sb.id)
            except docker.errors.NotFound:
                return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_3gb_write_against_a_256mb_cap_is_stopped(backend):
    sb = _open(backend)  # docker: the watchdog's stop is tested apart (test_docker_many_files_...)
    try:
        free, t0 = _free_mb(), time.monotonic()
        try:
            r = sb.exec("dd if=/dev/zero of=/tmp/big bs=1M count=3072; echo rc=$?", timeout=60)
            assert "rc=153" in r.stdout or "No space left" in r.stderr  # SIGXFSZ (128+25) or a full file system
            assert int(sb.exec("du -sm /tmp | cut -f1").stdout) <= 260  # the file stopped at the cap (+ a folder block)
        except SandboxLimitError as e:  # docker: the file at the cap and a folder's block are past it
            assert backend == "docker" and "wrote past its disk cap" in str(e)
        took = time.monotonic() - t0
        assert took < 10, f"{took:.1f} s"
        assert free - _free_mb() < 512  # other processes write too; 3 GB would show
    finally:
        sb.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_disk_cannot_be_reserved_without_writing_it(backend):
    """fallocate is refused (so tools fall back to writing, which the caps see); so are io_uring
    (its fallocate op would pass any syscall filter) and the 32-bit ABI (other syscall numbers)."""
    sb = _open(backend)
    try:
        with _host_drop() as drop:
            r = sb.exec(f"{{ {FALLOCATE_LOOP}; }} 2>&1 | sort | uniq -c; du -sm /tmp", timeout=30)
        assert "40 fallocate: fallocate failed: Operation not supported" in r.stdout, r.stdout
        assert "keep size mode is unsupported" in r.stdout  # the one `-n` call: EOPNOTSUPP as well
        assert int(r.stdout.split()[-2]) <= 1
        assert drop[0] < 512, drop
        probe = sb.exec("""python3 -c '
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
print("io_uring", libc.syscall(425, 4, 0), ctypes.get_errno())
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(bytes.fromhex("b814000000cd80c3"))  # mov eax, 20 (getpid, i386); int 0x80; ret
print("i386", ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))())
fd = os.open("/tmp/p", os.O_CREAT | os.O_WRONLY)
os.posix_fallocate(fd, 0, 1 << 20)  # glibc writes the blocks instead
print("posix_fallocate", os.fstat(fd).st_blocks * 512)
'""")
        assert probe.stdout.split("\n")[:3] == ["io_uring -1 38", "i386 -38", "posix_fallocate 1048576"], probe
    finally:
        sb.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_fallocate_loop_and_parallel_writers_are_stopped_at_the_cap(backend):
    """The kernel holds the cap: not one byte past it, however many writers and however loaded
    the host (bwrap: the /tmp tmpfs; docker: the layer's own file system, or the engine's quota)."""
    sb = _open(backend)
    t0 = time.monotonic()
    how = container.disk_cap(sb.engine) if backend == "docker" else None
    try:
        if backend == "docker":
            if how not in (container.LAYERFS, container.QUOTA):
                pytest.skip(f"this engine's disk caps are the watchdog's (a poll), so no exact cap to assert: {how}")
            layer = os.path.dirname(_upper_dir(sb))
        with _host_drop() as drop:
            r = sb.exec(f"({FALLOCATE_LOOP}) 2>/dev/null & {WRITERS}; du -s -B1 /tmp", timeout=60)
        assert "No space left on device" in r.stderr, r.stderr[-500:]
        used = int(r.stdout.split()[-2])
        assert CAP.disk_mb << 19 < used <= CAP.disk_mb << 20, used  # filled, and not a block past the cap
        assert time.monotonic() - t0 < 15
        assert drop[0] < MAX_HOST_DROP_MB, drop
    finally:
        sb.close()
    assert _gone(sb)
    if how == container.LAYERFS:  # the engine unmounted the layer's file system as it removed it: nothing left
        with open("/proc/self/mountinfo") as f:
            assert f" {layer} " not in f.read()


def _upper_dir(sb) -> str:
    from envs.sandbox.engine import client

    return client(sb.engine).api.inspect_container(sb.id)["GraphDriver"]["Data"]["UpperDir"]


@pytest.mark.docker
@pytest.mark.skipif(not engine_available(), reason="no Docker engine answers")
def test_docker_empty_files_run_out_at_the_layers_cap():
    """A file system per sandbox has its inodes (one per 16 KiB): empty files cannot use up the host's."""
    sb = _open("docker", Limits(memory_mb=1024, disk_mb=16, pids=64))
    try:
        if (how := container.disk_cap(sb.engine)) != container.LAYERFS:
            pytest.skip(f"this engine's disk caps are not a file system per sandbox: {how}")
        r = sb.exec("python3 -c 'import os\nfor i in range(100000): os.mknod(f\"/tmp/e{i}\")'; ls /tmp | wc -l", timeout=60)
        assert "No space left on device" in r.stderr and int(r.stdout.split()[-1]) <= 1024, r
    finally:
        sb.close()


@pytest.mark.docker
@pytest.mark.skipif(not engine_available(), reason="no Docker engine answers")
def test_docker_many_files_past_the_cap_stop_the_sandbox(watchdog_only):
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
def test_docker_empty_files_count_against_the_cap(watchdog_only):
    """Each file is charged a block at least: empty files cannot use up the host's inodes."""
    sb = _open("docker", Limits(memory_mb=1024, disk_mb=16, pids=64))
    try:
        with pytest.raises(SandboxLimitError, match="wrote past its disk cap"):  # 16 MB is 4096 blocks
            sb.exec("python3 -c 'import os\nfor i in range(100000): os.mknod(f\"/tmp/e{i}\")'; sleep 30", timeout=60)
    finally:
        sb.close()


@pytest.mark.docker
@pytest.mark.skipif(not engine_available(), reason="no Docker engine answers")
def test_a_terminal_episode_past_the_watchdogs_disk_cap_is_the_agents_failure(watchdog_only):
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
