"""The Docker backend against the real engine: persistent shell, limits, isolation, failures."""
from __future__ import annotations

import threading
import time

import pytest

from envs.sandbox.engine import client, engine_available
from envs.sandbox.protocol import Limits, Sandbox, SandboxError

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not engine_available(), reason="no Docker engine answers (scripts/setup.d/10-docker.sh starts one)"),
]

SMALL = Limits(memory_mb=256, pids=64, cpus=1.0)


@pytest.fixture
def sb(image):
    from envs.sandbox import open_sandbox  # the backend factory, as envs call it

    s = open_sandbox("docker", image, SMALL, pool_size=2)
    yield s
    s.close()


def test_protocol_and_persistent_shell(sb):
    assert isinstance(sb, Sandbox)
    assert sb.exec("cd /tmp && export FOO='a b'").ok
    r = sb.exec('pwd; echo "$FOO"')
    assert (r.stdout, r.exit_code) == ("/tmp\na b\n", 0)
    r = sb.exec("echo out; echo err >&2; (exit 3)")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 3)
    assert sb.exec("printf 'no newline'").stdout == "no newline"
    assert sb.exec("echo 'it''s' \"$((6*7))\" \\\\ 'x\ny'").stdout == "its 42 \\ x\ny\n"
    assert sb.exec("if then").exit_code == 2  # a syntax error stays inside eval
    assert sb.exec("cat").stdout == ""  # stdin is /dev/null, never the protocol stream
    assert sb.exec("pwd", workdir="/etc").stdout == "/etc\n"
    assert sb.exec("pwd").stdout == "/tmp\n"  # workdir does not move the shell
    assert sb.exec("id -un").stdout == "agent\n"


def test_timeout_kills_command_not_shell(sb):
    sb.exec("export KEEP=1; sleep 300 & echo $! > /tmp/bg")
    time.sleep(0.05)  # an agent's next command comes later than the 10 ms start-time tick
    t0 = time.monotonic()
    r = sb.exec("sleep 100", timeout=1.5)
    assert r.timed_out and r.exit_code is None and r.limit == "timeout"
    assert time.monotonic() - t0 < 10
    r = sb.exec('echo "$KEEP"; kill -0 "$(cat /tmp/bg)" && echo bg-alive')
    assert r.stdout == "1\nbg-alive\n" and not r.shell_restarted  # same shell, earlier job lives


def test_timeout_kills_the_rest_of_a_command_list(sb):
    r = sb.exec("sleep 30; sleep 30; sleep 30", timeout=1.0)
    assert r.timed_out and r.duration_s < 15 and "Killed" not in r.stderr
    r = sb.exec("echo next")
    assert r.stdout == "next\n" and not r.shell_restarted


def test_builtin_loop_restarts_shell(sb):
    r = sb.exec("while :; do :; done", timeout=1.0)
    assert r.timed_out
    r = sb.exec("echo back")
    assert r.stdout == "back\n" and r.shell_restarted


def test_exit_restarts_shell(sb):
    r = sb.exec("exit 7")
    assert r.exit_code == 7
    r = sb.exec("echo again")
    assert r.ok and r.shell_restarted


def test_output_flood_capped(sb):
    r = sb.exec("yes", timeout=20, max_output=4096)
    assert r.truncated and r.limit == "output" and not r.timed_out
    assert r.stdout.startswith("y\ny\n") and r.stdout.endswith("y\n")
    assert len(r.stdout) < 4096 + 200
    r = sb.exec("head -c 100000 /dev/zero | tr '\\0' x; echo; echo tail", max_output=1000)
    assert r.truncated and r.exit_code == 0 and r.stdout.endswith("tail\n") and r.stdout.startswith("x" * 400)
    assert sb.exec("echo fine").stdout == "fine\n"


def test_fork_bomb_stopped_by_pids_limit(sb):
    r = sb.exec(":(){ :|:& };:", timeout=5)
    assert r.exit_code is not None or r.timed_out  # the command came back
    top = client().api.top(sb.id)["Processes"]
    assert len(top) <= SMALL.pids + 2  # the pids limit held (+ the holder, and the top itself)
    sb.exec("kill -9 -1", timeout=5)  # the agent can clean up after itself...
    assert sb.exec("echo ok", timeout=10).stdout == "ok\n"  # ...and the sandbox works on


def test_memory_limit(sb):
    r = sb.exec("python3 -c 'b = bytearray(10 * 2**30); print(len(b))'", timeout=60)
    assert r.exit_code not in (0, None) and "10737418240" not in r.stdout
    assert sb.exec("echo alive").stdout == "alive\n"


def test_no_network(sb):
    r = sb.exec(
        "python3 -c 'import socket; s=socket.socket(); s.settimeout(2); s.connect((\"1.1.1.1\", 53))'",
        timeout=15,
    )
    assert r.exit_code != 0 and ("unreachable" in r.stderr.lower() or "timed out" in r.stderr.lower())
    assert sb.exec("ls /sys/class/net").stdout.split() == ["lo"]


def test_cannot_write_outside(sb):
    for target in ["/etc/passwd", "/usr/bin/x", "/proc/sys/kernel/hostname", "/sys/fs/cgroup/x"]:
        r = sb.exec(f"echo x >> {target}")
        assert r.exit_code != 0, target
    assert sb.exec("ls /var/run/docker.sock").exit_code != 0  # the engine is out of reach
    assert sb.exec("echo x > ~/mine && cat ~/mine").stdout == "x\n"


def test_files(sb, tmp_path):
    sb.write_file("deep/new/dir/a.txt", "hello\n")
    assert sb.read_file("deep/new/dir/a.txt") == b"hello\n"
    assert sb.exec("stat -c %U deep/new/dir/a.txt && echo more >> deep/new/dir/a.txt").ok
    sb.write_file("/tmp/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sb.exec("/tmp/run.sh").stdout == "ran\n"
    blob = bytes(range(256)) * 100
    sb.write_file("/tmp/bin", blob)
    assert sb.read_file("/tmp/bin") == blob
    with pytest.raises(FileNotFoundError):
        sb.read_file("/nope/none")
    with pytest.raises(ValueError):
        sb.read_file("/tmp/bin", max_bytes=10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "top.py").write_text("print('top')\n")
    (tmp_path / "sub" / "x.txt").write_text("x")
    sb.copy_in(str(tmp_path), "/home/agent/proj")
    r = sb.exec("cd ~/proj && python3 top.py && cat sub/x.txt && touch sub/y")
    assert r.stdout == "top\nx" and r.ok


def test_workdir_option(image):
    from envs.sandbox import open_sandbox

    s = open_sandbox("docker", image, SMALL, pool_size=1, workdir="/work")
    try:
        assert s.exec("pwd && touch f && stat -c %U .").stdout == "/work\nagent\n"
        s.write_file("rel.txt", "r")
        assert s.exec("cat /work/rel.txt").stdout == "r"
        assert s.exec("exit 1").exit_code == 1
        assert s.exec("pwd").stdout == "/work\n"  # a restarted shell starts there again
    finally:
        s.close()


def test_killed_container_raises(sb):
    client().api.kill(sb.id)
    with pytest.raises(SandboxError):
        sb.exec("echo hi")
    assert not sb.is_alive()


def test_kill_mid_exec_raises(sb):
    threading.Timer(1.0, lambda: client().api.kill(sb.id)).start()
    with pytest.raises(SandboxError):
        sb.exec("sleep 30", timeout=20)


def test_close_removes_container(image):
    from envs.sandbox.pool import open_sandbox

    s = open_sandbox(image, SMALL, pool_size=2)
    cid = s.id
    assert s.is_alive()
    s.close()
    s.close()  # twice is fine
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and client().api.containers(all=True, filters={"id": cid}):
        time.sleep(0.2)
    assert not client().api.containers(all=True, filters={"id": cid})
    with pytest.raises(SandboxError):
        s.exec("echo closed")


def test_warm_acquire_is_fast(image):
    from envs.sandbox import pool

    p = pool.get_pool(image, SMALL, pool_size=3)
    deadline = time.monotonic() + 60
    while p.stats()["ready"] < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    took, held = [], []
    try:
        for _ in range(3):  # the pool holds 3 ready: each acquire is warm
            t0 = time.perf_counter()
            held.append(p.acquire(timeout=30))
            took.append(time.perf_counter() - t0)
        assert sorted(took)[1] < 0.05  # median; the goal is 20 ms (the benchmark measures it)
        assert held[-1].exec("echo warm").stdout == "warm\n"
    finally:
        for s in held:
            s.close()


def test_only_verifier_sandboxes_give_root_capabilities(image):
    from envs.sandbox import open_sandbox

    kill_dac_fowner = 1 << 5 | 1 << 1 | 1 << 2 | 1 << 3  # CAP_KILL, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER
    for verifier, want in ((False, 0), (True, kill_dac_fowner)):
        s = open_sandbox("docker", image, SMALL, pool_size=1, verifier=verifier)
        try:
            _, out = s._root_exec(["grep", "CapEff", "/proc/self/status"])
            assert int(out.split()[1], 16) == want, (verifier, out)
        finally:
            s.close()
