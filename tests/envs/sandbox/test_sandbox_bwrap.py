"""The bubblewrap sandbox backend, against real bwrap (no mocks)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from envs.sandbox import BACKENDS, Limits, Sandbox, SandboxError, open_sandbox
from envs.sandbox.bwrap import BwrapSandbox, _processes
from tests.cli import REPO

pytestmark = pytest.mark.bwrap


def _uid_procs(uid: int) -> list[int]:
    return [p.pid for p in _processes() if p.uid == uid]


@pytest.fixture(scope="module")
def sb():
    box = open_sandbox("bwrap")
    yield box
    box.close()


def test_factory_dispatches_and_rejects_unknown_backends():
    with pytest.raises(ValueError, match="bwrap, docker"):
        open_sandbox("podman")
    assert set(BACKENDS) == {"bwrap", "docker"}


def test_is_a_sandbox(sb):
    assert isinstance(sb, Sandbox) and isinstance(sb, BwrapSandbox)
    assert sb.is_alive()


def test_cwd_and_env_vars_persist(sb):
    r = sb.exec("mkdir -p /tmp/deep/dir && cd /tmp/deep/dir && export OC_VAR='a b'; OC_PLAIN=7")
    assert r.ok, r
    r = sb.exec('pwd; echo "$OC_VAR"; echo "$OC_PLAIN"')
    assert r.stdout == "/tmp/deep/dir\na b\n7\n"
    r = sb.exec("pwd", workdir="/tmp")  # workdir applies to one command only
    assert r.stdout == "/tmp\n"
    assert sb.exec("pwd").stdout == "/tmp/deep/dir\n"
    sb.exec("cd ~")


def test_stdout_stderr_kept_apart_with_exit_codes(sb):
    r = sb.exec("echo to-out; echo to-err >&2; printf no-newline; (exit 3)")
    assert r.stdout == "to-out\nno-newline"
    assert r.stderr == "to-err\n"
    assert r.exit_code == 3 and not r.ok
    assert sb.exec("false").exit_code == 1
    assert sb.exec("true").exit_code == 0


def test_quotes_syntax_errors_and_binary_output_do_not_break_the_shell(sb):
    r = sb.exec("echo 'unterminated")
    assert r.exit_code != 0 and r.stderr
    r = sb.exec("printf 'a\\xff\\xfeb'; echo $'it\\'s'")
    assert r.stdout.startswith("a") and "\ufffd" in r.stdout and "it's" in r.stdout
    assert sb.exec("cat").stdout == ""  # stdin is /dev/null: a reader cannot swallow the protocol
    assert sb.exec("echo still-here").stdout == "still-here\n"


def test_timeout_kills_the_command_not_the_shell(sb):
    sb.exec("cd /tmp && export KEEP=1")
    t0 = time.monotonic()
    r = sb.exec("sleep 100", timeout=0.5)
    assert r.timed_out and r.exit_code is None and r.limit == "timeout"
    assert time.monotonic() - t0 < 5
    assert "Killed" not in r.stderr
    after = sb.exec("echo $KEEP; pwd")
    assert after.stdout == "1\n/tmp\n" and not after.shell_restarted
    r = sb.exec("sleep 100; sleep 100; echo next", timeout=0.5)  # the rest of the list is killed too
    assert r.timed_out
    assert not sb.exec("true").shell_restarted
    sb.exec("sleep 60 & echo $! > /tmp/bg.pid")
    time.sleep(0.05)
    assert sb.exec("sleep 100", timeout=0.5).timed_out
    assert sb.exec("kill -0 $(cat /tmp/bg.pid)").exit_code == 0, "an earlier background job survives"
    sb.exec("kill $(cat /tmp/bg.pid)")
    sb.exec("cd ~")


def test_builtin_loop_timeout_restarts_the_shell(sb):
    r = sb.exec("while true; do :; done", timeout=0.3)
    assert r.timed_out
    nxt = sb.exec("echo ok")
    assert nxt.stdout == "ok\n" and nxt.shell_restarted


def test_yes_flood_is_capped(sb):
    t0 = time.monotonic()
    r = sb.exec("yes", timeout=30, max_output=4096)
    assert time.monotonic() - t0 < 10, "a flood must be stopped, not run to the timeout"
    assert r.truncated and not r.timed_out and r.exit_code is None and r.limit == "output"
    assert len(r.stdout) < 4096 + 200
    assert r.stdout.startswith("y\ny\n") and "bytes of output cut" in r.stdout
    assert sb.exec("echo fine").stdout == "fine\n"


def test_large_output_keeps_head_and_tail(sb):
    r = sb.exec("seq 1 100000", max_output=1000)
    assert r.truncated and r.exit_code == 0
    assert r.stdout.startswith("1\n2\n3\n") and r.stdout.endswith("99999\n100000\n")


def test_fork_bomb_is_stopped_by_the_pids_limit():
    with open_sandbox("bwrap", limits=Limits(pids=32)) as box:
        r = box.exec(":(){ :|:& };:", timeout=3)
        peak = 0
        for _ in range(10):
            peak = max(peak, len(_uid_procs(box.uid)))
            time.sleep(0.05)
        assert peak <= 32, f"{peak} processes with a pids limit of 32"
        assert r.exit_code is not None or r.timed_out
        assert "ok" in box.exec("echo ok", timeout=10).stdout  # a builtin: needs no new process
        uid = box.uid
    deadline = time.monotonic() + 5
    while _uid_procs(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _uid_procs(uid), "close() must kill the bomb"


def test_allocating_10gb_is_stopped_by_the_memory_limit(sb):
    r = sb.exec("python3 -c 'b = bytearray(10 * 2**30); print(len(b))'", timeout=30)
    assert r.exit_code != 0
    assert "MemoryError" in r.stderr
    assert sb.exec("echo alive").stdout == "alive\n"


def test_no_network(sb):
    code = textwrap.dedent(
        """
        import socket
        s = socket.socket()
        s.settimeout(3)
        try:
            s.connect(("1.1.1.1", 80))
            print("CONNECTED")
        except OSError as e:
            print("failed", e.errno)
        """
    )
    sb.write_file("net.py", code)
    r = sb.exec("python3 net.py", timeout=20)
    assert r.stdout.startswith("failed"), r
    assert sb.exec("cat /proc/net/dev | grep -v -E 'lo:|Inter|face' | wc -l").stdout.strip() == "0"


def test_writing_outside_the_sandbox_is_impossible(sb):
    name = f"oc-escape-{uuid.uuid4().hex}"
    r = sb.exec(
        f"echo x > /usr/{name}; echo x > /etc/{name}; echo x > /{name}; "
        f"echo x > /tmp/{name}; echo x > ~/{name}; ls {REPO} 2>&1; id -u"
    )
    assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr
    assert not os.path.exists(f"/usr/{name}") and not os.path.exists(f"/etc/{name}")
    assert not os.path.exists(f"/{name}") and not os.path.exists(f"/tmp/{name}")
    assert "No such file" in r.stdout  # the host's folders are not there at all
    assert int(r.stdout.split()[-1]) != 0  # not root inside
    assert sb.exec(f"cat /tmp/{name}").stdout == "x\n"  # its own /tmp is writable
    assert sb.exec("cat /proc/self/status | grep CapEff").stdout.split()[1] == "0000000000000000"


def test_files_in_and_out(sb, tmp_path):
    blob = bytes(range(256)) * 10
    sb.write_file("sub/dir/blob.bin", blob, mode=0o600)
    assert sb.read_file("sub/dir/blob.bin") == blob
    assert sb.read_file(os.path.join("/work", "sub/dir/blob.bin"), max_bytes=5) == blob[:5]
    assert sb.exec("stat -c %a sub/dir/blob.bin").stdout.strip() == "600"
    sb.write_file("/tmp/t.txt", "héllo\n")
    assert sb.exec("cat /tmp/t.txt").stdout == "héllo\n"
    with pytest.raises(FileNotFoundError):
        sb.read_file("/nope/missing")
    with pytest.raises(SandboxError):
        sb.write_file("/usr/cannot", "x")
    (tmp_path / "pkg" / "inner").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "inner" / "b.txt").write_text("bee\n")
    sb.copy_in(str(tmp_path / "pkg"), "/work/copied")
    assert sb.exec("cat copied/a.py copied/inner/b.txt").stdout == "A = 1\nbee\n"
    with pytest.raises(NotADirectoryError):
        sb.copy_in(str(tmp_path / "missing"), "/work/x")


def test_dead_shell_is_restarted_and_files_survive():
    with open_sandbox("bwrap") as box:
        box.exec("echo kept > note.txt && cd /tmp")
        r = box.exec("exit 7")
        assert r.exit_code == 7
        nxt = box.exec("cat ~/note.txt; pwd")
        assert nxt.shell_restarted and nxt.stdout == "kept\n/work\n"
        assert not box.exec("true").shell_restarted
        os.kill(box._shell_pid(), signal.SIGKILL)  # killed from outside
        time.sleep(0.1)
        again = box.exec("cat note.txt")
        assert again.shell_restarted and again.stdout == "kept\n"
        bg = box.exec("sleep 30 & exit 0", timeout=5)  # a child holding the pipes must not hang us
        assert not bg.timed_out
        assert box.exec("echo x").shell_restarted


def test_dead_sandbox_raises_and_close_frees_everything():
    box = open_sandbox("bwrap")
    box.exec("sleep 300 &")
    uid = box.uid
    assert _uid_procs(uid)
    box._holder.kill()  # the sandbox's pid 1 dies: everything in it goes
    box._holder.wait(5)
    assert not box.is_alive()
    with pytest.raises(SandboxError):
        box.exec("true")
    box.close()
    box.close()  # twice is fine
    assert not _uid_procs(uid)
    with pytest.raises(SandboxError, match="closed"):
        box.exec("true")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_runner_killed_leaves_nothing(sig, tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        from envs.sandbox import open_sandbox
        box = open_sandbox("bwrap")
        box.exec("sleep 300 &")
        print(box.uid, flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        uid = int(proc.stdout.readline())
        assert _uid_procs(uid)
        proc.send_signal(sig)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 5
    while _uid_procs(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _uid_procs(uid)


def test_an_image_directory_becomes_the_read_only_root(sb):
    with open_sandbox("bwrap", image="/") as box:  # the host's own tree, as a stand-in rootfs
        r = box.exec("test -d /var && echo has-var; echo x > /opt-nope; id -u")
        assert r.stdout.startswith("has-var\n") and int(r.stdout.split()[-1]) != 0
        assert "Read-only" in r.stderr or "Permission denied" in r.stderr
    assert sb.exec("test -d /var || echo no-var").stdout == "no-var\n"


def test_bad_arguments_are_clear_errors(sb):
    with pytest.raises(ValueError, match="root file system"):
        open_sandbox("bwrap", image="debian:bookworm")
    with pytest.raises(ValueError):
        sb.exec("true", timeout=0)


def test_sandbox_outlives_the_thread_that_opened_it():
    import threading

    made: list[Sandbox] = []
    t = threading.Thread(target=lambda: made.append(open_sandbox("bwrap")))
    t.start()
    t.join(30)
    box = made[0]
    try:
        time.sleep(0.2)
        assert box.is_alive() and box.exec("echo up").stdout == "up\n"
    finally:
        box.close()


def test_a_live_process_cgroups_survive_another_process_starting():
    """A new sandbox's cgroup exists before its first process joins it: another process starting
    meanwhile (and sweeping the leftovers of crashed runs) must not remove it. A dead process's
    empty cgroups are removed."""
    from envs.sandbox import cgroups

    mine = cgroups.create("openclaw-test", Limits())
    if mine is None:
        pytest.skip("this host lets us make no cgroup")
    parents = [os.path.dirname(d) for d in mine.dirs]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftovers = [f"{p}/openclaw-test-{dead.stdout.strip()}-0" for p in parents]
    for d in leftovers:
        os.makedirs(d, exist_ok=True)
    try:
        other = subprocess.run(
            [sys.executable, "-c", "from envs.sandbox import cgroups, Limits\n"
             "g = cgroups.create('openclaw-test', Limits()); print(g is not None); g.remove()"],
            cwd=REPO, capture_output=True, text=True, timeout=60)
        assert other.stdout.strip() == "True", other.stderr
        assert all(os.path.isdir(d) for d in mine.dirs)  # still empty, still there
        assert not any(os.path.exists(d) for d in leftovers)
    finally:
        mine.remove()
        for d in leftovers:
            if os.path.exists(d):
                os.rmdir(d)
    assert not any(os.path.exists(d) for d in mine.dirs)
