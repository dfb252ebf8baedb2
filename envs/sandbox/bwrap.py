"""Bubblewrap backend: a throwaway root with no network, one long-lived bash per sandbox.

Layout. A `bwrap` process holds the sandbox: new mount, pid, net, ipc, uts and cgroup
namespaces (no user namespace: we run as root and want the host's uids), the host's /usr (or an
`image` directory holding a root file system) bound read-only, a few /etc files, private tmpfs
mounts at /tmp and the work dir (sized by `Limits.disk_mb`), and `sleep infinity` as its only
job. The shell enters those namespaces with `nsenter`, so a shell that dies is restarted without
losing the sandbox's files; only the holder's death ends the sandbox.

Limits. The shell runs as a uid of its own (random, unused on the host) with every capability
dropped, no-new-privs and the sandboxes' seccomp filter (seccomp.py: no new user namespaces, no
fallocate; the verifier's root processes get it too), under rlimits: address space
(`memory_mb`), processes (`pids`: RLIMIT_NPROC binds only a non-root uid, and a uid per sandbox
makes the count per sandbox), file size (`disk_mb`), no core files. Where a cgroup hierarchy is writable (v1 or v2) the shell is
also put in a cgroup with the memory, pids and CPU (`cpus`) limits; elsewhere CPU is not capped.

Timeouts. A command past its timeout (or flooding output) is killed from the host: every
process of the sandbox's uid started since the command began, except the shell; a builtin loop
in the shell itself gets the shell restarted (the next ExecResult says shell_restarted).

Cleanup. `--die-with-parent` ties the holder to the thread that started it (Linux's
parent-death signal), so one long-lived thread starts every holder. `close()` kills the holder,
and with it every process in its pid namespace; an atexit hook and a SIGTERM handler close what
is still open; cgroups a crashed run left are removed at the next start.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import io
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import weakref
from typing import Any, Callable, NamedTuple

from envs.sandbox import cgroups, seccomp, treecopy, verifier
from envs.sandbox.protocol import ExecResult, Limits, SandboxError
from envs.sandbox.shell import STATE_COMMAND, Pipes, RawResult, ShellSession, bash_quote, exec_result, restore_command

BWRAP = "/usr/bin/bwrap"
START_TIMEOUT_S = 10.0
_ETC = (
    "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "ssl",
    "ca-certificates", "mime.types", "nsswitch.conf", "python3", "python3.11",
)
_ROOT_DIRS = ("bin", "lib", "lib32", "lib64", "libx32", "sbin")
_MISSING_FILE = 44  # exit code read_file's command uses for "no such file"
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="bwrap-spawn")


def _root_args(image: str | None) -> list[str]:
    """bwrap arguments for the read-only part of the root."""
    if image is not None:
        return ["--ro-bind", image, "/"]
    args = ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]  # implicit parents get 0700
    for d in _ROOT_DIRS:
        host = f"/{d}"
        if os.path.islink(host):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    for name in _ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def _data_fd(data: bytes) -> int:
    """A pipe's read end already holding `data` (for bwrap's --ro-bind-data)."""
    r, w = os.pipe()
    try:
        os.write(w, data)  # small: fits the pipe buffer
    finally:
        os.close(w)
    return r


def _read_all(fd: int, deadline: float) -> bytes:
    out = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            return out
        out += chunk
    raise SandboxError(f"bwrap did not report its sandbox within {START_TIMEOUT_S:.0f}s")


def _read_line(fd: int, deadline: float) -> bytes:
    out = b""
    while not out.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 64)
        if not chunk:
            break
        out += chunk
    return out


def _drain_into(n: int, consumer: str) -> str:
    """A command feeding the next `n` bytes of the shell's stdin to `consumer`. All `n` are read
    even when the consumer fails early: a leftover byte would be read as the next command."""
    return f"head -c {n} | {{ {consumer}; __r=$?; cat >/dev/null; exit $__r; }}"


class BwrapSandbox:
    """A `Sandbox` (envs/sandbox/protocol.py) on bubblewrap."""

    def __init__(self, image: str | None = None, limits: Limits = Limits(), workdir: str = "/work"):
        if not os.path.exists(BWRAP):
            raise SandboxError(f"{BWRAP} not found: install Debian's bubblewrap (scripts/apt-packages.txt)")
        if image is not None and not os.path.isdir(image):
            raise ValueError(
                f"bwrap sandbox image must be a directory holding a root file system, got {image!r} "
                "(None uses the host's /usr read-only)"
            )
        if not workdir.startswith("/") or workdir in ("/", "/tmp", "/proc", "/dev", "/usr"):
            raise ValueError(f"workdir must be an absolute path of its own, got {workdir!r}")
        self.image = image
        self.limits = limits
        self.workdir = workdir
        self.uid = random.SystemRandom().randrange(1_000_000, 2_000_000_000)
        self._lock = threading.RLock()
        self._holder: subprocess.Popen | None = None
        self._holder_pid = 0  # pid 1 of the sandbox's pid namespace, as the host sees it
        self._shell: subprocess.Popen | None = None
        self._session: ShellSession | None = None
        self._restarted = False  # tell the next ExecResult that the shell was restarted
        self._cmd_ticks = 0  # when the current command began (clock ticks since boot)
        self._cgroup: cgroups.Group | None = None
        self._mounts: list[str] = []  # the mount table at start (verify compares)
        self._keeper_pid = 0  # the holder's `sleep infinity`
        self._closed = False
        _track(self)
        try:
            self._start_holder()
            self._cgroup = cgroups.create("openclaw-bwrap", limits)
            self._start_shell()
        except BaseException:
            self.close()
            raise

    # ---- life cycle ----------------------------------------------------------------------
    def _start_holder(self) -> None:
        lim = self.limits
        info_r, info_w = os.pipe()
        passwd = _data_fd(f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{self.uid}:{self.uid}::{self.workdir}:/bin/bash\n".encode())
        group = _data_fd(f"root:x:0:\nsandbox:x:{self.uid}:\n".encode())
        size = str(lim.disk_mb << 20)
        args = [BWRAP, "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        if not lim.network:
            args.append("--unshare-net")
        args += ["--die-with-parent", "--new-session", "--info-fd", str(info_w), "--hostname", "sandbox"]
        args += _root_args(self.image)
        for fd, dest in ((passwd, "/etc/passwd"), (group, "/etc/group")):
            args += ["--perms", "0644", "--ro-bind-data", str(fd), dest]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--size", size, "--perms", "1777", "--tmpfs", "/tmp"]
        args += ["--size", size, "--perms", "0777", "--tmpfs", self.workdir]
        if self.image is None:  # root-owned and empty until the verifier runs (envs/sandbox/verifier.py)
            for d in (verifier.TESTS_DIR, verifier.LOGS_DIR):
                args += ["--size", size, "--perms", "0755", "--tmpfs", d]
        # bwrap reports the child's pid before the mounts are in place: the holder says "ready"
        # on stdout once its root is set up, and then only sleeps.
        args += ["--chdir", self.workdir, "--clearenv", "/bin/sh", "-c", "echo ready; exec sleep infinity"]
        try:
            # Started from one long-lived thread: --die-with-parent fires when the *thread* that
            # forked bwrap exits, and callers run in worker threads that come and go.
            self._holder = _SPAWNER.submit(
                subprocess.Popen, args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(info_w, passwd, group), start_new_session=True,
            ).result()
        finally:
            for fd in (info_w, passwd, group):
                os.close(fd)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            raw = _read_all(info_r, deadline)
        finally:
            os.close(info_r)
        assert self._holder.stdout is not None
        ready = _read_line(self._holder.stdout.fileno(), deadline)
        self._holder.stdout.close()
        try:
            if ready != b"ready\n":
                raise ValueError("holder did not start")
            self._holder_pid = int(json.loads(raw)["child-pid"])
            self._mounts = self._mount_table()
            # bwrap stays pid 1 of the namespace; its one child (`sleep infinity`) keeps it alive.
            self._keeper_pid = next((p.pid for p in _processes() if p.ppid == self._holder_pid), 0)
        except (ValueError, KeyError):
            err = b""
            if self._holder.poll() is not None and self._holder.stderr is not None:
                err = self._holder.stderr.read()
            raise SandboxError(f"bwrap failed to start: {err.decode(errors='replace').strip() or raw!r}") from None

    def _enter(self, ids: list[str], caps: str = "-all") -> list[str]:
        """argv prefix: into the sandbox's namespaces, under its rlimits, as `ids` with `caps`."""
        lim = self.limits
        rlimits = [f"--as={lim.memory_mb << 20}", f"--nproc={lim.pids}", f"--fsize={lim.disk_mb << 20}", "--core=0"]
        return [
            *seccomp.prefix(sys.executable),  # no user namespaces (a way around the dropped caps), no fallocate
            "nsenter", "-t", str(self._holder_pid), "-m", "-p", "-i", "-u", "-C", "-r", "-w",
            *([] if lim.network else ["-n"]),
            "--", "prlimit", *rlimits, "--",
            "setpriv", *ids, "--clear-groups", f"--inh-caps={caps}", f"--bounding-set={caps}",
            "--no-new-privs", "--pdeathsig=KILL", "--",
        ]

    def _start_shell(self) -> None:
        args = [*self._enter([f"--reuid={self.uid}", f"--regid={self.uid}"]), "/bin/bash", "--noprofile", "--norc"]
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.workdir, "USER": "sandbox",
            "LANG": "C.UTF-8", "TERM": "dumb", "PYTHONDONTWRITEBYTECODE": "1",
        }
        self._shell = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, bufsize=0, start_new_session=True,
        )
        assert self._shell.stdin and self._shell.stdout and self._shell.stderr
        self._session = ShellSession(Pipes(
            self._shell.stdin.fileno(), self._shell.stdout.fileno(), self._shell.stderr.fileno(),
            self._kill_command, lambda: self._shell is not None and self._shell.poll() is None,
        ))
        probe = self._session.run("cd -- " + bash_quote(self.workdir), timeout=START_TIMEOUT_S, max_output=4096)
        if probe.exit_code != 0:
            detail = probe.stderr.decode(errors="replace").strip()
            self._stop_shell()
            if not self.is_alive():
                raise SandboxError("the bwrap sandbox died while starting its shell")
            raise SandboxError(f"the sandbox shell did not start: {detail}")
        if self._cgroup is not None:
            self._cgroup.add(self._shell_pid())

    def _shell_pid(self) -> int:
        """The bash's host pid: nsenter's only child (nsenter forks to enter the pid namespace)."""
        assert self._shell is not None
        for p in _processes():
            if p.ppid == self._shell.pid:
                return p.pid
        return self._shell.pid

    def _stop_shell(self) -> None:
        shell, self._shell, self._session = self._shell, None, None
        if shell is None:
            return
        self._kill_command(keep_shell=False)
        _kill(shell)
        for f in (shell.stdin, shell.stdout, shell.stderr):
            if f is not None:
                f.close()

    def _kill_command(self, keep_shell: bool = True) -> None:
        """SIGKILL what the current command started (every process of the sandbox's uid that
        began since it did, except the shell), until nothing is left. Background jobs of earlier
        commands live on. With keep_shell=False: everything, the shell included."""
        spare = self._shell.pid if (keep_shell and self._shell is not None) else -1
        since = self._cmd_ticks if keep_shell else 0
        _kill_until_gone(lambda: [p.pid for p in _processes()
                                  if p.uid == self.uid and p.ppid != spare and p.start >= since])

    def _ensure_shell(self) -> None:
        if self._closed:
            raise SandboxError("sandbox is closed")
        if not self.is_alive():
            raise SandboxError("the bwrap sandbox died (its holder process exited); open a new one")
        if self._session is None or self._session.broken or (self._shell and self._shell.poll() is not None):
            self._stop_shell()
            self._start_shell()
            self._restarted = True

    def _run(self, command: str, timeout: float, max_output: int, workdir: str | None = None,
             stdin_data: bytes | None = None) -> tuple[RawResult, bool]:
        if timeout <= 0 or max_output < 0:
            raise ValueError("timeout must be > 0 and max_output >= 0")
        with self._lock:
            self._ensure_shell()
            restarted, self._restarted = self._restarted, False
            assert self._session is not None
            self._cmd_ticks = _boot_ticks()
            ooms = self._cgroup.oom_kills() if self._cgroup is not None else 0
            raw = self._session.run(command, timeout, max(max_output, 1), workdir, stdin_data)
            if self._cgroup is not None and self._cgroup.oom_kills() > ooms:
                raw.stderr += (f"\n[memory limit: the sandbox reached its {self.limits.memory_mb} MB; files in /tmp and "
                               f"{self.workdir} count against it (tmpfs), so the kernel killed a process]").encode()
            if raw.shell_lost and self._shell is not None and raw.exit_code is None and not raw.timed_out:
                try:  # the command ended the shell (`exit 3`): report the shell's status
                    raw.exit_code = self._shell.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    pass
            return raw, restarted

    # ---- Sandbox protocol ----------------------------------------------------------------
    def exec(self, command: str, timeout: float = 30.0, max_output: int = 64 * 1024,
             workdir: str | None = None) -> ExecResult:
        raw, restarted = self._run(command, timeout, max_output, workdir)
        return exec_result(raw, max_output, restarted)

    def _path(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir}/{path}"

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        blob = data.encode() if isinstance(data, str) else bytes(data)
        p = bash_quote(self._path(path))
        cmd = _drain_into(len(blob), f'mkdir -p -- "$(dirname -- {p})" && cat > {p} && chmod {mode:o} -- {p}')
        raw, _ = self._run(cmd, START_TIMEOUT_S + len(blob) / 1e7, 4096, stdin_data=blob)
        if raw.exit_code != 0:
            raise SandboxError(f"write_file({path!r}) failed: {raw.stderr.decode(errors='replace').strip()}")

    def read_file(self, path: str, max_bytes: int = 16 * 1024 * 1024) -> bytes:
        p = bash_quote(self._path(path))
        cmd = f"[ -f {p} ] || exit {_MISSING_FILE}; head -c {int(max_bytes)} -- {p}"
        raw, _ = self._run(f"({cmd})", START_TIMEOUT_S + max_bytes / 1e7, max_bytes)
        if raw.exit_code == _MISSING_FILE:
            raise FileNotFoundError(f"no such file in the sandbox: {path}")
        if raw.exit_code != 0:
            raise SandboxError(f"read_file({path!r}) failed: {raw.stderr.decode(errors='replace').strip()}")
        return raw.stdout

    def copy_in(self, local_dir: str, dest: str) -> None:
        if not os.path.isdir(local_dir):
            raise NotADirectoryError(f"copy_in: {local_dir!r} is not a folder")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(local_dir, arcname=".")
        blob = buf.getvalue()
        d = bash_quote(self._path(dest))
        cmd = _drain_into(len(blob), f"mkdir -p -- {d} && tar -x --no-same-owner -C {d} -f -")
        raw, _ = self._run(cmd, START_TIMEOUT_S + len(blob) / 1e7, 4096, stdin_data=blob)
        if raw.exit_code != 0:
            raise SandboxError(f"copy_in({local_dir!r}, {dest!r}) failed: {raw.stderr.decode(errors='replace').strip()}")

    # ---- the verifier (envs/sandbox/verifier.py) ------------------------------------------------
    def _mount_table(self) -> list[str]:
        """The sandbox's mounts: mount point and options (fields 5 and 6 of mountinfo)."""
        with open(f"/proc/{self._holder_pid}/mountinfo") as f:
            return sorted(" ".join(line.split()[4:6]) for line in f)

    def _namespace_pids(self) -> list[int]:
        """Host pids of every process in the sandbox's pid namespace but its holder."""
        try:
            ns = os.readlink(f"/proc/{self._holder_pid}/ns/pid")
        except OSError:
            return []
        pids = []
        for p in _processes():
            try:
                if p.pid not in (self._holder_pid, self._keeper_pid) and os.readlink(f"/proc/{p.pid}/ns/pid") == ns:
                    pids.append(p.pid)
            except OSError:
                pass
        return pids

    def _kill_namespace(self) -> None:
        """SIGKILL every process of the sandbox but its holder, until none is left."""
        _kill_until_gone(self._namespace_pids)

    def _snapshot(self) -> list[dict]:
        """The agent's processes: pid as the sandbox sees it, state, argv."""
        out = []
        for p in _processes():
            if p.uid != self.uid:
                continue
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    nspid = next(line.split()[-1] for line in f if line.startswith("NSpid:"))
                with open(f"/proc/{p.pid}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")[:-1]
            except (OSError, StopIteration):
                continue
            out.append({"pid": int(nspid), "state": stat[stat.rfind(")") + 2:].split()[0], "cmdline": argv})
        return sorted(out, key=lambda d: d["pid"])

    def verify(self, tests_dir: str, script: str, workdir: str, timeout: float) -> verifier.Verification:
        """Kill the agent, copy the tests in, run them as root (envs/sandbox/verifier.py). The
        sandbox's root is read-only outside /tmp and the work dir, so what the agent changed
        outside them shows only as a change of its mounts."""
        with self._lock:
            if self._closed or not self.is_alive():
                raise SandboxError("the bwrap sandbox is closed or died")
            if self.image is not None:
                raise SandboxError("the verifier needs the host-root sandbox (image=None): it mounts /tests and /logs")
            processes = self._snapshot()
            self._stop_shell()
            self._kill_namespace()
            now = self._mount_table()
            changes = [("M", line.split()[0]) for line in sorted(set(now) ^ set(self._mounts))]
            changed, tampered = verifier.outside(changes, [])
            root = f"/proc/{self._holder_pid}/root"
            for d in (verifier.TESTS_DIR, verifier.LOGS_DIR):
                for entry in os.listdir(root + d):
                    shutil.rmtree(os.path.join(root + d, entry))
            shutil.copytree(tests_dir, root + verifier.TESTS_DIR, dirs_exist_ok=True)
            for d in ("verifier", "home", "agent"):
                os.makedirs(f"{root}{verifier.LOGS_DIR}/{d}", mode=0o755)
            with open(root + verifier.PROCESSES_FILE, "w") as f:
                json.dump(processes, f)
            caps = "-all," + ",".join(f"+{c.lower()}" for c in verifier.CAPS)
            as_root = self._enter(["--reuid=0", "--regid=0"], caps)
            with tempfile.TemporaryFile() as log:
                try:
                    rc = subprocess.run([*as_root, *verifier.command(script, workdir, timeout)], stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT, timeout=timeout + 30).returncode
                except subprocess.TimeoutExpired:
                    rc = 124
                self._kill_namespace()  # nothing the tests started may touch the reward once they are done
                size = log.seek(0, os.SEEK_END)
                log.seek(0)
                text = log.read(verifier.MAX_LOG).decode("utf-8", "replace")
                if size > verifier.MAX_LOG:
                    log.seek(max(verifier.MAX_LOG, size - verifier.MAX_LOG))
                    text += "\n[...]\n" + log.read().decode("utf-8", "replace")
            # Read inside the sandbox: a symlink the tests left resolves there, not on the host.
            r = subprocess.run([*as_root, "/usr/bin/head", "-c", "4096", verifier.REWARD_FILE], stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=30)
            reward = r.stdout.decode("utf-8", "replace") if r.returncode == 0 else None
            self._kill_namespace()
        # nsenter passes on the signal that ended its child: timeout -s KILL reads as -9 here
        return verifier.Verification(reward, verifier.cap(text), rc in (124, 137, -signal.SIGKILL), changed, tampered, processes)

    def _writable(self) -> list[str]:
        """The sandbox's writable trees (its tmpfs mounts; the rest of its root is read-only)."""
        return ["/tmp", self.workdir] + ([verifier.TESTS_DIR, verifier.LOGS_DIR] if self.image is None else [])

    def fork(self) -> BwrapSandbox:
        """A new sandbox (a spare started ahead, see `_spare`) with a copy of this one's writable
        trees, owned by the fork's own uid, and its shell's cwd and exported variables. Copied
        from the host through each holder's root (envs/sandbox/treecopy.py: symlinks stay links,
        never followed), while this sandbox's lock is held."""
        with self._lock:
            raw, _ = self._run(STATE_COMMAND, START_TIMEOUT_S, 1 << 22)
            if raw.exit_code != 0 or raw.truncated:
                raise SandboxError(f"cannot read the shell's state to fork: {raw.stderr.decode(errors='replace').strip()}")
            child = _spare(self.image, self.limits, self.workdir)
            try:
                src, dst = f"/proc/{self._holder_pid}/root", f"/proc/{child._holder_pid}/root"
                for d in self._writable():
                    treecopy.copy_tree(src + d, dst + d, {self.uid: child.uid})
            except OSError as e:
                child.close()
                raise SandboxError(f"fork: copying the sandbox's files failed: {e}") from e
            except BaseException:
                child.close()
                raise
        r = child.exec(restore_command(raw.stdout.decode("utf-8", "surrogateescape")), timeout=START_TIMEOUT_S)
        if r.exit_code != 0:
            child.close()
            raise SandboxError(f"the fork's shell did not take the state: {r.stderr.strip()}")
        _start_spare(self.image, self.limits, self.workdir)  # after the copy, not competing with it
        return child

    def is_alive(self) -> bool:
        return not self._closed and self._holder is not None and self._holder.poll() is None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop_shell()
            if self._holder is not None:
                _kill(self._holder)  # pid 1 of the namespace: the kernel kills the rest
                if self._holder.stderr is not None:
                    self._holder.stderr.close()
            self._kill_command(keep_shell=False)  # stragglers that left the namespace (none expected)
            if self._cgroup is not None:
                self._cgroup.remove()
            _live.discard(self)

    def __enter__(self) -> BwrapSandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


class _Proc(NamedTuple):
    pid: int
    ppid: int
    uid: int
    start: int  # clock ticks since boot


_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _boot_ticks() -> int:
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * _TICKS_PER_S)


def _processes() -> list[_Proc]:
    """Every process on the host."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{name}").st_uid
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split(b" ")  # fields from the 3rd (state) on
        out.append(_Proc(int(name), int(fields[1]), uid, int(fields[19])))
    return out


# ---- close everything at exit and on SIGTERM ---------------------------------------------
_live: weakref.WeakSet[BwrapSandbox] = weakref.WeakSet()
_hooks_installed = False


def close_all() -> None:
    for sb in list(_live):
        sb.close()


# ---- spares: a fork takes a sandbox started ahead (starting one is most of a fork's time) ----
_spares: dict[tuple, concurrent.futures.Future] = {}
_spares_lock = threading.Lock()
_SPARE_MAKER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="bwrap-spare")


def _spare(image: str | None, limits: Limits, workdir: str) -> BwrapSandbox:
    """A fresh sandbox of this kind: the spare started after the last fork of its kind (waited
    for if it is still starting) if it is alive, else a new one."""
    with _spares_lock:
        ready = _spares.pop((image, limits, workdir), None)
    if ready is not None:
        try:
            sb = ready.result(timeout=2 * START_TIMEOUT_S)
            if sb.is_alive():
                return sb
            sb.close()
        except (SandboxError, concurrent.futures.TimeoutError):
            pass  # a spare that failed to start: a new one below says why, if it fails too
    return BwrapSandbox(image, limits, workdir)


def _start_spare(image: str | None, limits: Limits, workdir: str) -> None:
    """Start the next fork's sandbox in the background. Spares are sandboxes like any other (in
    `_live`, their holders dying with this process), so the exit cleanup closes an unused one."""
    with _spares_lock:
        if (image, limits, workdir) not in _spares:
            _spares[(image, limits, workdir)] = _SPARE_MAKER.submit(BwrapSandbox, image, limits, workdir)


def wait_spares(timeout_s: float) -> bool:
    """Wait until every spare has started (a benchmark timing a fork that finds its spare
    ready); False if one had not by the timeout."""
    with _spares_lock:
        starting = list(_spares.values())
    return not concurrent.futures.wait(starting, timeout=timeout_s).not_done


def _on_sigterm(signum: int, frame: Any, previous: Any = signal.SIG_DFL) -> None:
    close_all()
    if callable(previous):
        previous(signum, frame)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _track(sb: BwrapSandbox) -> None:
    global _hooks_installed
    _live.add(sb)
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(close_all)
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)
        if previous in (signal.SIG_DFL, None) or callable(previous):
            signal.signal(signal.SIGTERM, lambda s, f: _on_sigterm(s, f, previous))


def open_sandbox(image: str | None = None, limits: Limits = Limits(), **opts: Any) -> BwrapSandbox:
    """The backend entry point `envs.sandbox.open_sandbox` dispatches to."""
    return BwrapSandbox(image=image, limits=limits, **opts)


def _kill_until_gone(victims: Callable[[], list[int]], rounds: int = 50) -> None:
    """SIGKILL the pids `victims()` names until it names none (a fork bomb respawns while we
    kill; the pids limit bounds it)."""
    for _ in range(rounds):
        pids = victims()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.002)
