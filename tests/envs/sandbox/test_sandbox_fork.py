"""Sandbox forks on both backends, against real bwrap and Docker: a fork continues like its
original (files, cwd, exported variables), independently of it, and releases what it holds."""
from __future__ import annotations

import signal
import textwrap
import time

import pytest

from envs.sandbox import Limits, SandboxError, open_sandbox
from envs.sandbox.engine import engine_available
from tests.ready import start_ready

SMALL = Limits(memory_mb=256, pids=64, disk_mb=512)
BACKENDS = [
    pytest.param("bwrap", marks=pytest.mark.bwrap),
    pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.skipif(not engine_available(), reason="no Docker engine answers")]),
]
# A trunk: folders, a private file, a symlink, an exported and an unexported variable, a
# variable unset, a file of the start state deleted, a file in /tmp, and a background job.
SETUP = ("touch gone.txt; mkdir -p d/e && cd d && printf 'one\\n' > f && chmod 600 f && ln -s f lnk && "
         "export OC_A='x y' OC_B=2 && OC_PLAIN=3 && unset LANG && rm ../gone.txt && "
         "head -c 3000000 /dev/urandom > /tmp/blob && (sleep 300 &)")
PROBE = "pwd; cat f; readlink lnk; stat -c %a f; echo \"$OC_A|$OC_B|${LANG-unset}\"; ls -a ..; md5sum < /tmp/blob"


def _open(backend: str):
    return open_sandbox(backend, None, SMALL, pool_size=2) if backend == "docker" else open_sandbox(backend, None, SMALL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_continues_identically_then_independently(backend):
    trunk = _open(backend)
    try:
        assert trunk.exec(SETUP).ok
        fork = trunk.fork()
        try:
            a, b = trunk.exec(PROBE), fork.exec(PROBE)
            assert a.ok and a.stdout == b.stdout, (a, b)
            assert "/d\none\nf\n600\nx y|2|unset\n" in a.stdout and "gone.txt" not in a.stdout
            # Different actions: neither sees the other's.
            fork.exec("echo two > f; export OC_A=fork; cd e; rm /tmp/blob")
            trunk.exec("echo three >> f")
            assert trunk.exec('cat f; echo "$OC_A"; pwd; ls /tmp').stdout.split("\n")[:3] == ["one", "three", "x y"]
            assert "blob" in trunk.exec("ls /tmp").stdout
            r = fork.exec('cat ../f; echo "$OC_A"; pwd; ls /tmp')
            assert r.stdout.split("\n")[:3] == ["two", "fork", a.stdout.split("\n")[0] + "/e"]
            assert "blob" not in r.stdout
            with fork.fork() as grandchild:  # a fork of a fork
                assert grandchild.exec("cat ../f").stdout == "two\n"
        finally:
            fork.close()
        with pytest.raises(SandboxError, match="closed"):
            fork.exec("true")
        assert trunk.exec("cat f").ok  # closing the fork leaves the trunk alone
    finally:
        trunk.close()


# Folders of many files, copied in batches: 300 small ones with modes of their own, large ones
# among them, a nested folder; every file must arrive whole, with its mode and time.
MANY = ("mkdir -p many/sub && cd many && for i in $(seq 300); do echo $i > s$i; done && chmod 751 s7 s300 && "
        "for i in 1 2 3; do head -c 1500000 /dev/urandom > b$i; done && touch -d 2001-02-03 s5 && "
        "head -c 4096 /dev/urandom | split -b 64 - sub/p && cd ..")
LISTING = "cd many && find . -type f -printf '%p %m %s %TY\\n' | sort && find . -type f -exec md5sum {} + | sort"


@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_copies_folders_of_many_files_whole(backend):
    with _open(backend) as trunk:
        assert trunk.exec(MANY, timeout=60).ok
        with trunk.fork() as fork:
            a, b = trunk.exec(LISTING, max_output=1 << 20), fork.exec(LISTING, max_output=1 << 20)
            assert a.ok and a.stdout == b.stdout
            assert a.stdout.count("\n") == 2 * (300 + 3 + 64) and "./s7 751 " in a.stdout and "./s5 644 2 2001" in a.stdout


def test_bwrap_fork_is_its_own_user_and_closes(tmp_path):
    from envs.sandbox.bwrap import _processes

    with open_sandbox("bwrap", None, SMALL) as trunk:
        trunk.exec("echo hi > f")
        fork = trunk.fork()
        assert fork.uid != trunk.uid
        assert fork.exec("stat -c %u f; id -u").stdout.split() == [str(fork.uid)] * 2
        fork.exec("sleep 300 &")
        fork.close()
        assert not [p for p in _processes() if p.uid == fork.uid]
        assert trunk.is_alive()


RUNNER = textwrap.dedent("""
    import sys, time
    from envs.sandbox import Limits, open_sandbox
    from envs.sandbox.sweeper import run_id
    backend = sys.argv[1]
    opts = {"pool_size": 1} if backend == "docker" else {}
    trunk = open_sandbox(backend, None, Limits(memory_mb=256, pids=64, disk_mb=512), **opts)
    trunk.exec("echo x > f")
    fork = trunk.fork()
    fork.exec("sleep 300 &")
    if backend == "bwrap":  # every bwrap sandbox alive: the trunk, the fork and the spare started after it
        from envs.sandbox import bwrap
        bwrap.wait_spares(30)
        print("READY", ",".join(str(sb.uid) for sb in list(bwrap._live)), run_id(), flush=True)
    else:
        print("READY", fork.id, run_id(), flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_cleanup_covers_forks(backend):
    proc, (fork_id, run) = start_ready(RUNNER, backend)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    if backend == "bwrap":  # the holder dies with the thread that started it: its processes go too
        from envs.sandbox.bwrap import _processes

        uids = {int(u) for u in fork_id.split(",")}
        assert len(uids) == 3  # the trunk, its fork and the next fork's spare
        while [p for p in _processes() if p.uid in uids] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in _processes() if p.uid in uids]
        return
    from envs.sandbox import sweeper
    from envs.sandbox.engine import client

    labels = client().api.inspect_container(fork_id)["Config"]["Labels"]
    assert labels[sweeper.L_RUN] == run  # the fork carries its run's labels: the next sweep removes it
    while client().api.containers(all=True, filters={"id": fork_id}) and time.monotonic() < deadline:
        sweeper.sweep()
        time.sleep(0.5)
    assert not client().api.containers(all=True, filters={"id": fork_id})


# What only a root agent can do to the image's own files: delete one (a whiteout in the upper
# dir), replace a folder (an opaque one), change a folder's mode; plus a hard link, a fifo, and a
# symlink to / (copied as a link: following it would copy the host's root).
ROOT_SETUP = ("rm /etc/debian_version && rm -rf /usr/share/doc && mkdir /usr/share/doc && echo new > /usr/share/doc/only && "
              "chmod 700 /opt && echo x > /root/h && ln /root/h /root/h2 && mkfifo /root/p && ln -s / /root/up && "
              "mkdir -p /srv/t && echo deep > /srv/t/f && cd /srv/t && export OC_R=1")
ROOT_PROBE = ("ls /etc/debian_version 2>&1; ls /usr/share/doc; stat -c '%a' /opt; [ /root/h -ef /root/h2 ] && echo linked; "
              "stat -c %F /root/p; readlink /root/up; ls /root/up/ | head -3; stat -c '%U %s' /srv/t/f; pwd; echo $OC_R")


@pytest.mark.docker
@pytest.mark.skipif(not engine_available(), reason="no Docker engine answers")
@pytest.mark.parametrize("on_host", [True, False], ids=["host-copy", "engine-copy"])
def test_docker_fork_carries_root_changes_to_the_image(on_host, monkeypatch):
    from envs.sandbox.docker import DockerSandbox

    if not on_host:  # the path for an engine on another host: docker diff and the archive API
        monkeypatch.setattr(DockerSandbox, "_host_layers", property(lambda self: None))
    with open_sandbox("docker", None, SMALL, pool_size=2, user="root") as trunk:
        assert (trunk._host_layers is not None) == on_host  # this machine's engine is local
        assert trunk.exec(ROOT_SETUP).ok
        with trunk.fork() as fork:
            a, b = trunk.exec(ROOT_PROBE), fork.exec(ROOT_PROBE)
            assert "No such file" in a.stdout and "\nonly\n" in a.stdout and "linked\nfifo\n/\n" in a.stdout
            assert "root 5\n/srv/t\n1\n" in a.stdout
            if on_host:
                assert b.stdout == a.stdout
            else:  # the archive path carries neither a folder's mode nor a hard link
                assert b.stdout == a.stdout.replace("\n700\n", "\n755\n").replace("linked\n", "")
            fork.exec("echo fork > /srv/t/f; rm /usr/share/doc/only")
            assert trunk.exec("cat /srv/t/f; ls /usr/share/doc").stdout == "deep\nonly\n"
