"""Docker backend: one container per sandbox, one long-lived bash in it driven over the exec socket.

The shell's stdin, stdout and stderr travel on one hijacked exec connection (Docker's
multiplexed stream: an 8-byte header per frame says stdout or stderr); this module reads the
frames straight off the socket (`_ExecStream`, the transport of shell.py's `ShellSession`), so the
persistent-shell protocol (end markers, head+tail caps, exit codes, the kill on a timeout or a flood)
is bubblewrap's, with no pump thread per sandbox (at 128 sandboxes the harness must stay near the
bare socket loop's rate).

A command past its timeout (or flooding output) is killed by a helper exec that SIGKILLs every
process of the container started since the command began, except the shell: background jobs of
earlier commands live on (unless started in the same 10 ms clock tick as the killed command).
If the shell itself does not answer then (a builtin loop, `exec >f`), it is killed and restarted
on the next command, whose result says shell_restarted. If even the helper cannot run (a fork
bomb holds every pid), the container is restarted: files stay.

A container that stops, or a daemon error, raises SandboxError (the env reports infra_error);
one the disk watchdog stopped raises SandboxLimitError (the agent's doing: env_error).
A sandbox lives on one engine (engine.py: the local one, or a host that placement.py chose) and
every API call about it goes there: a container id means nothing on another engine. On a host
with another kernel the kill helper's time threshold is shifted by that kernel's uptime.
Containers (container.py creates them; pool.py's `open_sandbox`, the backend's entry point, hands
them out) run with no network, every capability dropped (root's execs keep VERIFIER_CAPS where a
verifier will run and the agent is another user; ROOT_CAPS where the agent is root), no-new-privileges,
and the memory / pids / CPU limits of `Limits`; the shell and the verifier start under seccomp.py's
filter, on top of the engine's profile (no fallocate: disk is used only by writing it). The agent is
the user the caller names (default the non-root `agent`; terminal tasks: the image's USER, root when
it names none). The container's pid 1 is a `sleep` that ignores SIGCHLD (so the kernel reaps what
is orphaned under it) and has no signal handler, so no process inside can signal it, root
included: an agent cannot take its sandbox down. `disk_mb` binds as a storage quota where the
engine's storage can cap it (overlay2 on xfs with pquota), else as the size of a file system of the
container's own holding its writable layer (layerfs.py; a write past it fails with ENOSPC), and
where neither can be had as a per-file size limit plus diskwatch.py's watchdog, which stops a
container past its cap (container.disk_cap says which).
"""
from __future__ import annotations

import base64
import concurrent.futures
import functools
import io
import json
import os
import posixpath
import socket
import tarfile
import threading
import time
from typing import Any, Callable

import docker

from envs.sandbox import diskwatch, seccomp, treecopy, verifier
from envs.sandbox.container import API_ERRORS, remove_container
from envs.sandbox.engine import client, primary
from envs.sandbox.engine import name as engine_name
from envs.sandbox.protocol import ExecResult, SandboxError, SandboxLimitError
from envs.sandbox.shell import STATE_COMMAND, RawResult, ShellSession, bash_quote, exec_result, restore_command

DEFAULT_USER = "agent"
PYTHON = "/usr/bin/python3"  # every sandbox image has it: the kill helper, the verifier and seccomp.py run on it
# Root's capabilities in a container a verifier will run in (open_sandbox(verifier=True)): kill
# the agent's processes, read what it made private. Other containers keep none.
VERIFIER_CAPS = ("KILL", *verifier.CAPS)
# A root agent's (and so its verifier's) capabilities: what a root shell uses to work on files and
# processes. Not DAC_READ_SEARCH (open_by_handle_at), MKNOD, NET_RAW, SETPCAP, SETFCAP, SYS_CHROOT.
ROOT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE")
_RECV = 1 << 16  # above 128 KiB each recv buffer would be an mmap+munmap
SEND_TIMEOUT_S = 30.0  # the engine reads an exec's input as it comes: a send stuck this long is a dead connection
_CLK_TCK = os.sysconf("SC_CLK_TCK")
try:
    with open("/proc/sys/kernel/random/boot_id") as _f:
        _BOOT_ID = _f.read().strip()  # this kernel's; a container that reads the same shares our clock
except OSError:
    _BOOT_ID = ""

# Runs inside the container (as the sandbox user) to kill what a command started: every process
# started at or after the command (argv[2], clock ticks since boot: the host kernel's clock)
# except pid 1, itself and the shell (argv[1]; killed too when argv[3] is "1"). It keeps at it
# until three passes 10 ms apart find nothing (a command list forks its next command right
# after the kill: `sleep 9; sleep 9`) or for at most argv[4] seconds.
_KILL_PY = r"""
import os, signal, sys, time
shell, t0, kill_shell, me = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", os.getpid()
end, quiet = time.monotonic() + float(sys.argv[4]), 0
while quiet < 3 and time.monotonic() < end:
    hit = 0
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in (1, me):
            continue
        try:
            st = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()  # [0] state, [19] start time
        pid = int(d)
        if fields[0] == "Z" or (not kill_shell if pid == shell else int(fields[19]) < t0):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            hit += 1
        except OSError:
            pass
    quiet = 0 if hit else quiet + 1
    time.sleep(0.01)
"""
KILL_LINGER_S = 1.0


def _boot_ticks() -> int:
    """Now in the kernel's process start-time unit (floored like /proc/PID/stat's field 22)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _CLK_TCK)


class DockerSandbox:
    """A started container with one persistent bash (one command at a time: exec holds a lock)."""

    def __init__(self, container_id: str, user: str = DEFAULT_USER, workdir: str = "/home/agent",
                 on_close: Callable[[DockerSandbox], None] | None = None, make_workdir: bool = False,
                 url: str | None = None, sibling: Callable[[], DockerSandbox] | None = None):
        self.id = container_id
        self.engine = primary() if url is None else url  # the engine the container lives on
        self.user = user
        self.workdir = workdir  # the shell starts here; relative file paths resolve here
        self._make_workdir = make_workdir  # not in the image: create it, owned by the user
        self._on_close = on_close
        self._sibling = sibling  # a new sandbox like this one (its pool's acquire): what `fork` fills
        self._api = client(self.engine).api
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._raw: Any = None  # the SocketIO over _sock: holding it keeps the connection open
        self._exec_id = ""
        self._shell_pid = 0
        self._uid = self._gid = 0
        self._session: ShellSession | None = None
        self._restarted = False  # the next result must say the shell was restarted
        self._cmd_t0 = 0  # when the running command began, in clock ticks since the engine's boot
        self._tick_offset = 0  # the engine's kernel clock minus ours (0 on this machine's kernel)
        self._closed = False

    # ---- the shell ---------------------------------------------------------------------------
    def start_shell(self) -> None:
        """Open the exec connection and start bash (learning its pid, uid and gid)."""
        try:
            self._exec_id = self._api.exec_create(
                self.id, [*seccomp.prefix(PYTHON), "bash", "--noprofile", "--norc"], stdin=True, stdout=True, stderr=True,
                tty=False, user=self.user, workdir=None if self._make_workdir else self.workdir,
            )["Id"]
            raw = self._api.exec_start(self._exec_id, socket=True)
        except API_ERRORS as e:
            raise self._infra_error(f"cannot start the shell: {e}") from e
        self._sock = getattr(raw, "_sock", raw)  # the plain socket under the SocketIO wrapper
        self._raw = raw
        self._session = ShellSession(_ExecStream(self._sock, self._kill_command))
        r = self._run_raw("read -r b </proc/sys/kernel/random/boot_id; read -r u _ </proc/uptime; "
                          "echo $$ $UID $GROUPS ${b:-?} ${u:-?}", 10.0, 4096, kill=False)
        try:
            pid, uid, gid, boot, uptime = r.stdout.decode(errors="replace").split()
            self._shell_pid, self._uid, self._gid = int(pid), int(uid), int(gid)
            # Another kernel (a remote host): its uptime read before our clock below, so the
            # threshold errs early (a command's processes are never missed).
            same = boot in ("?", _BOOT_ID) or uptime == "?"
            self._tick_offset = 0 if same else int(float(uptime) * _CLK_TCK) - _boot_ticks()
        except ValueError:
            self._close_shell()
            raise self._infra_error(f"the shell did not start: {r.stdout[:200]!r} {r.stderr[:200]!r}") from None
        if self._make_workdir:
            self._ensure_dir(self.workdir)
            if self._run_raw(f"builtin cd -- {bash_quote(self.workdir)}", 10.0, 4096, kill=False).exit_code != 0:
                self._close_shell()
                raise self._infra_error(f"cannot enter the work dir {self.workdir}")

    def _close_shell(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    def idle_ok(self) -> bool:
        """Cheap check (no API call) that the idle shell's connection is still open."""
        if self._sock is None or self._closed:
            return False
        try:
            self._sock.setblocking(False)
            try:
                data = self._sock.recv(_RECV, socket.MSG_PEEK)
            finally:
                self._sock.setblocking(True)
            return bool(data)  # b"" is EOF; data here is output of background jobs
        except BlockingIOError:
            return True
        except OSError:
            return False

    def _infra_error(self, what: str) -> SandboxError:
        """A SandboxError that says what became of the container (SandboxLimitError where the
        disk watchdog stopped it)."""
        try:
            st = self._api.inspect_container(self.id)["State"]
            if not st.get("Running"):
                what += f" (container stopped: exit {st.get('ExitCode')}, OOMKilled={st.get('OOMKilled')})"
        except docker.errors.NotFound:
            what += " (container is gone)"
        except API_ERRORS as e:
            what += f" (daemon error: {e})"
        where = f" on {engine_name(self.engine)}" if self.engine else ""
        if (why := diskwatch.reason(self.id)) is not None:
            return SandboxLimitError(f"sandbox {self.id[:12]}{where}: {why}; {what}")
        return SandboxError(f"sandbox {self.id[:12]}{where}: {what}")

    def _container_running(self) -> bool:
        try:
            return bool(self._api.inspect_container(self.id)["State"].get("Running"))
        except API_ERRORS:
            return False

    def _kill_command(self, with_shell: bool = False) -> bool:
        """Kill what the current command started (and the shell too if asked). False if the
        helper could not run (pids exhausted, container gone)."""
        t0 = self._cmd_t0
        try:
            ex = self._api.exec_create(
                self.id, [PYTHON, "-c", _KILL_PY, str(self._shell_pid), str(t0), "1" if with_shell else "0",
                          str(KILL_LINGER_S)],
                user=self.user, stdout=True, stderr=True,
            )["Id"]
            self._api.exec_start(ex)
            return self._api.exec_inspect(ex).get("ExitCode") == 0
        except API_ERRORS:
            return False

    def _run_raw(self, command: str, timeout: float, max_output: int, workdir: str | None = None,
                 kill: bool = True) -> RawResult:
        """One command through the shell (shell.py's driver), then what the driver leaves to the
        backend: a shell that does not answer is killed (or the container restarted), a shell that
        ended reports its exit status, and a lost shell is restarted on the next command."""
        assert self._session is not None
        self._cmd_t0 = _boot_ticks() + self._tick_offset
        raw = self._session.run(command, timeout, max_output, workdir, kill=kill)
        if raw.shell_lost and not raw.shell_exited and kill:
            self._recover()  # the shell does not answer: kill it (or restart the container)
        if raw.shell_exited:
            rc = self._shell_exit_code()
            raw.exit_code = None if raw.timed_out or raw.output_killed else rc
        if raw.shell_lost:
            self._close_shell()
            self._restarted = True
        return raw

    def _shell_exit_code(self) -> int | None:
        """The shell's connection closed: its exit status if the container lives on, else
        SandboxError. A shell killed by a signal may be the container going down (the stream
        closes before the daemon marks it stopped), so that case waits a moment to tell."""
        for _ in range(20):
            if not self._container_running():
                raise self._infra_error("the container stopped during the command")
            try:
                rc = self._api.exec_inspect(self._exec_id).get("ExitCode")
            except API_ERRORS as e:
                raise self._infra_error(f"daemon error: {e}") from e
            if rc is not None and rc < 128:
                return rc  # the command ended the shell (`exit 3`)
            time.sleep(0.1)
        return rc

    def _recover(self) -> None:
        """The shell did not come back after a kill: kill it; failing that, restart the container."""
        if self._kill_command(with_shell=True):
            return
        try:
            self._api.restart(self.id, timeout=0)
        except API_ERRORS as e:
            raise self._infra_error(f"cannot restart the container: {e}") from e

    # ---- Sandbox protocol --------------------------------------------------------------------
    def _ready_shell(self) -> None:
        """Under the lock: a live shell to run in (started when there is none)."""
        if self._closed:
            raise SandboxError("sandbox is closed")
        if self._sock is None:
            if not self._container_running():
                raise self._infra_error("the container is not running")
            self.start_shell()

    def exec(self, command: str, timeout: float = 30.0, max_output: int = 64 * 1024,
             workdir: str | None = None) -> ExecResult:
        if timeout <= 0 or max_output < 0:
            raise ValueError("timeout must be > 0 and max_output >= 0")
        with self._lock:
            self._ready_shell()
            restarted, self._restarted = self._restarted, False
            raw = self._run_raw(command, timeout, max(max_output, 1), workdir)
        return exec_result(raw, max_output, restarted)

    # ---- fork --------------------------------------------------------------------------------
    def fork(self) -> DockerSandbox:
        """A fresh container of this one's pool given this one's file changes, and its shell's
        cwd and exported variables. Where the engine runs on this host with an overlay2 root
        (`_host_layers`), the changes are read from this container's upper dir and written into
        the fork's root on the host (envs/sandbox/treecopy.py: whiteouts are deletions, owners
        and modes kept, symlinks never followed). Elsewhere, from what `docker diff` lists:
        deletions replayed by the sandbox user, added trees and changed files copied engine-side
        with their owners; a changed mode or owner of a folder the image already had is then not
        carried. The shell's state is read while the files are copied (its command runs builtins
        only; this sandbox's lock keeps any other command out of both). The fork is the pool's
        like any sandbox: closed, swept and labelled the same way."""
        if self._sibling is None:
            raise SandboxError("this Docker sandbox was not opened from a pool (open_sandbox): it cannot fork")
        with self._lock:
            self._ready_shell()
            state: concurrent.futures.Future[RawResult] = concurrent.futures.Future()
            threading.Thread(target=_settle, args=(state, lambda: self._run_raw(STATE_COMMAND, 10.0, 1 << 22, kill=False)),
                             name="fork-state", daemon=True).start()
            try:
                child = self._filled_sibling()
            finally:
                concurrent.futures.wait([state])  # the shell is the reader's until it answered
            try:
                raw = state.result()
                if raw.exit_code != 0 or raw.truncated:
                    raise SandboxError(f"cannot read the shell's state to fork: {raw.stderr.decode(errors='replace').strip()}")
            except BaseException:
                child.close()
                raise
        r = child.exec(restore_command(raw.stdout.decode("utf-8", "surrogateescape")), timeout=10.0)
        if r.exit_code != 0:
            child.close()
            raise SandboxError(f"the fork's shell did not take the state: {r.stderr.strip()}")
        return child

    def _filled_sibling(self) -> DockerSandbox:
        """A new sandbox of this one's pool (its shell not yet told this one's state) holding
        this one's file changes (see `fork`)."""
        assert self._sibling is not None
        mine = self._host_layers
        child = self._sibling()
        try:
            theirs = child._host_layers if mine else None
            if mine and theirs:
                treecopy.copy_tree(mine[0], theirs[1], upper=True)
            else:
                child._take_changes(self)
        except OSError as e:
            child.close()
            raise self._infra_error(f"fork: copying the container's changes on the host failed: {e}") from e
        except BaseException:
            child.close()
            raise
        return child

    @functools.cached_property
    def _host_layers(self) -> tuple[str, str] | None:
        """(upper dir, merged dir) of this container's overlay2 root when its engine runs on this
        host and the overlay keeps every change whole in the upper dir; else None. Asked once: a
        container keeps its layers for life (a restart mounts the same dirs again)."""
        try:
            driver = self._api.inspect_container(self.id)["GraphDriver"]
        except API_ERRORS as e:
            raise self._infra_error(f"cannot inspect the container: {e}") from e
        data = driver.get("Data") or {}
        upper, merged = data.get("UpperDir"), data.get("MergedDir")
        if driver.get("Name") != "overlay2" or not upper or not merged:
            return None
        if not (os.access(upper, os.R_OK | os.X_OK) and os.access(merged, os.W_OK | os.X_OK)):
            return None  # another host's engine, or not ours to touch (not root)
        options = _mount_options(merged)
        return (upper, merged) if options is not None and treecopy.overlay_plain(options) else None

    def _take_changes(self, src: DockerSandbox) -> None:
        """Make this container's files what `src`'s are, from `src`'s diff against the image."""
        try:
            diff = src._api.diff(src.id) or []
        except API_ERRORS as e:
            raise src._infra_error(f"docker diff failed: {e}") from e
        gone = sorted(d["Path"] for d in diff if d["Kind"] == 2)
        if gone:
            try:
                ex = self._api.exec_create(self.id, ["rm", "-rf", "--", *gone], user=self.user, stdout=True, stderr=True)["Id"]
                msg = self._api.exec_start(ex)
                code = self._api.exec_inspect(ex).get("ExitCode")
            except API_ERRORS as e:
                raise self._infra_error(f"fork: deleting what the original deleted failed: {e}") from e
            if code != 0:
                raise SandboxError(f"fork: cannot delete what the original deleted: {msg.decode(errors='replace').strip()[:300]}")
        added: list[str] = []  # trees copied whole: what lies under them is covered
        for d in sorted(diff, key=lambda d: d["Path"]):
            path = d["Path"]
            if d["Kind"] == 2 or any(path.startswith(a + "/") for a in added):
                continue
            if d["Kind"] == 0 and (src._stat(path) or {}).get("mode", 0) & (1 << 31):
                continue  # a folder of the image whose contents changed: the changes are listed apart
            if d["Kind"] == 1:
                added.append(path)
            try:
                stream, _ = src._api.get_archive(src.id, path)
                self._api.put_archive(self.id, posixpath.dirname(path) or "/", stream)
            except API_ERRORS as e:
                raise self._infra_error(f"fork: copying {path} failed: {e}") from e

    def _path(self, path: str) -> str:
        return posixpath.normpath(path if path.startswith("/") else posixpath.join(self.workdir, path))

    def _tarinfo(self, name: str, size: int, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, mode, int(time.time())
        info.uid, info.gid = self._uid, self._gid  # the sandbox user owns it
        return info

    def _put(self, dest_dir: str, blob: bytes) -> None:
        """Unpack a tar into `dest_dir`, creating it (as the sandbox user) if missing."""
        for attempt in (1, 2):
            try:
                self._api.put_archive(self.id, dest_dir, blob)
                return
            except docker.errors.NotFound as e:
                if attempt == 2 or "no such container" in str(e).lower():
                    raise self._infra_error(f"cannot write into {dest_dir}: {e}") from e
                self._mkdir(dest_dir)
            except API_ERRORS as e:
                raise self._infra_error(f"cannot write into {dest_dir}: {e}") from e

    def _stat(self, path: str) -> dict[str, Any] | None:
        """The engine's stat of `path` in the container (name, size, mode, mtime), None when it
        does not exist; no process inside runs."""
        try:  # HEAD on the archive endpoint: a stat, without packing the folder
            res = self._api.head(self._api._url("/containers/{0}/archive", self.id), params={"path": path})
            if res.status_code != 200:
                return None
            return json.loads(base64.b64decode(res.headers.get("X-Docker-Container-Path-Stat") or "e30="))
        except (*API_ERRORS, ValueError) as e:
            raise self._infra_error(f"cannot look up {path}: {e}") from e

    def _exists(self, path: str) -> bool:
        """Whether `path` exists in the container, asked of the engine."""
        return self._stat(path) is not None

    def _ensure_dir(self, path: str) -> None:
        """Create folder `path` owned by the sandbox user if it does not exist (an existing one
        is left as it is: unpacking over it would change its owner and mode)."""
        if self._exists(path):
            return
        info = self._tarinfo(posixpath.normpath(path).lstrip("/"), 0, 0o755)
        info.type = tarfile.DIRTYPE
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.addfile(info)
        self._put("/", buf.getvalue())

    def _mkdir(self, path: str) -> None:
        try:
            ex = self._api.exec_create(self.id, ["mkdir", "-p", "--", path], user=self.user)["Id"]
            msg = self._api.exec_start(ex)
            code = self._api.exec_inspect(ex).get("ExitCode")
        except API_ERRORS as e:
            raise self._infra_error(f"mkdir {path} failed: {e}") from e
        if code != 0:
            raise PermissionError(f"cannot create {path} in the sandbox: {msg.decode(errors='replace').strip()}")

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        blob = data.encode() if isinstance(data, str) else bytes(data)
        full = self._path(path)
        parent, name = posixpath.split(full)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.addfile(self._tarinfo(name, len(blob), mode), io.BytesIO(blob))
        self._put(parent, buf.getvalue())

    def read_file(self, path: str, max_bytes: int = 16 * 1024 * 1024) -> bytes:
        full = self._path(path)
        try:
            stream, stat = self._api.get_archive(self.id, full)
        except docker.errors.NotFound as e:
            if "no such container" in str(e).lower():
                raise self._infra_error(f"cannot read {full}: {e}") from e
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from None
        except API_ERRORS as e:
            raise self._infra_error(f"cannot read {full}: {e}") from e
        if stat.get("mode", 0) & (1 << 31):  # Go's os.ModeDir
            raise IsADirectoryError(f"{path} is a folder in the sandbox")
        if stat.get("size", 0) > max_bytes:
            raise ValueError(f"{path} is {stat['size']} bytes, over max_bytes={max_bytes}")
        blob = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            member = tar.next()
            f = tar.extractfile(member) if member is not None else None
            if f is None:
                raise FileNotFoundError(f"{path} is not a regular file in the sandbox")
            return f.read(max_bytes)

    def copy_in(self, local_dir: str, dest: str) -> None:
        if not os.path.isdir(local_dir):
            raise NotADirectoryError(f"copy_in: {local_dir!r} is not a folder")

        def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid, info.gid = self._uid, self._gid
            info.uname = info.gname = ""
            return info

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for entry in sorted(os.listdir(local_dir)):
                tar.add(os.path.join(local_dir, entry), arcname=entry, filter=owned)
        self._put(self._path(dest), buf.getvalue())

    # ---- the verifier (envs/sandbox/verifier.py) ------------------------------------------------
    def _root_exec(self, argv: list[str], workdir: str = "/") -> tuple[int | None, str]:
        """Run argv as root in a new exec (nothing of the agent's shell); exit code and output."""
        try:
            ex = self._api.exec_create(self.id, argv, user="0", workdir=workdir, stdout=True, stderr=True)["Id"]
            out = bytearray()
            for chunk in self._api.exec_start(ex, stream=True):
                out += chunk
                if len(out) > 4 * verifier.MAX_LOG:  # keep the head and the tail
                    out = out[: verifier.MAX_LOG] + b"\n[...]\n" + out[-verifier.MAX_LOG:]
            return self._api.exec_inspect(ex).get("ExitCode"), out.decode("utf-8", "replace")
        except API_ERRORS as e:
            raise self._infra_error(f"verifier exec failed: {e}") from e

    def _root_tar(self, tests_dir: str, processes: list[dict]) -> bytes:
        """/tests (a copy of tests_dir) and /logs, every entry owned by root."""
        def root(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
            return info

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(tests_dir, arcname=verifier.TESTS_DIR.lstrip("/"), filter=root)
            for d in ("logs", "logs/verifier", "logs/home", "logs/agent"):
                info = root(tarfile.TarInfo(d))
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            blob = json.dumps(processes).encode()
            info = root(tarfile.TarInfo(verifier.PROCESSES_FILE.lstrip("/")))
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
        return buf.getvalue()

    def verify(self, tests_dir: str, script: str, workdir: str, timeout: float,
               writable: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm")) -> verifier.Verification:
        """Kill the agent, copy the tests in, run them as root (envs/sandbox/verifier.py). The
        container is stopped afterwards: the episode is over. Where the kill helper cannot be
        trusted to end them all, the container is restarted after it, so the kernel ends every
        process: a root agent's processes share the helper's uid (they could stop or trace it),
        and a helper that gave no snapshot was missing or broken (the image's python3)."""
        with self._lock:
            if self._closed:
                raise SandboxError("sandbox is closed")
            self._close_shell()
            _, out = self._root_exec(["/usr/bin/env", "-i", f"PATH={verifier.PATH}", PYTHON, "-c", verifier.SEAL_PY, str(self._uid)])
            try:
                processes = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                processes = None  # no python3, or the agent broke it (docker diff tells which)
            if processes is None or self._uid == 0:
                try:
                    self._api.restart(self.id, timeout=0)
                except API_ERRORS as e:
                    raise self._infra_error(f"cannot restart the container to end the agent's processes: {e}") from e
            try:
                kinds = {0: "C", 1: "A", 2: "D"}
                diff = [(kinds.get(d["Kind"], "?"), d["Path"]) for d in self._api.diff(self.id) or []]
            except API_ERRORS as e:
                raise self._infra_error(f"docker diff failed: {e}") from e
            # A work dir of "/" (an image without WORKDIR) would make every path writable.
            changed, tampered = verifier.outside(diff, [*writable, *([self.workdir] if self.workdir != "/" else [])],
                                                  script, self._exists)
            self._root_exec(["/bin/rm", "-rf", "--", verifier.TESTS_DIR, verifier.LOGS_DIR])
            self._put("/", self._root_tar(tests_dir, processes or []))
            if self._exists(verifier.REWARD_FILE):  # the engine's word, not the image's rm: left by the agent
                tampered.append(f"A {verifier.REWARD_FILE}")
            rc, log = self._root_exec([*seccomp.prefix(PYTHON), *verifier.command(script, workdir, timeout)])
            try:  # nothing the tests started may touch the reward once they are done
                self._api.kill(self.id)
                self._api.wait(self.id, timeout=30)
            except API_ERRORS as e:
                raise self._infra_error(f"cannot stop the container after the tests: {e}") from e
        try:
            reward: str | None = self.read_file(verifier.REWARD_FILE, 4096).decode("utf-8", "replace")
        except (FileNotFoundError, IsADirectoryError, ValueError):
            reward = None
        return verifier.Verification(reward, verifier.cap(log), rc in (124, 137), changed, tampered, processes or [])

    def is_alive(self) -> bool:
        return not self._closed and self._container_running()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_shell()
        if self._on_close is not None:
            self._on_close(self)  # the pool removes the container (in the background)
        else:
            try:
                remove_container(self.id, self.engine)
            except API_ERRORS:
                pass  # the sweeper removes it: it carries this run's labels

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _settle(future: concurrent.futures.Future, fn: Callable[[], Any]) -> None:
    """Give `future` what fn() returns, or the error it raises."""
    try:
        future.set_result(fn())
    except BaseException as e:  # the waiting caller gets it
        future.set_exception(e)


def _mount_options(path: str) -> str | None:
    """The file system options of the mount at `path` in this process's mount table, or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path and " - " in line:
                return line.rsplit(" - ", 1)[1].split()[2]
    return None


class _ExecStream:
    """The shell's Transport (shell.py) over its hijacked exec socket: stdin goes in as it is,
    stdout and stderr come back in frames (header: stream(1) pad(3) size(4, big endian)),
    read straight off the socket with no pump thread."""

    def __init__(self, sock: socket.socket, kill_command: Callable[[], bool]):
        self.sock = sock
        self._kill = kill_command
        self._buf = bytearray()  # a frame not yet whole

    def kill_command(self) -> bool:
        return self._kill()

    def shell_alive(self) -> bool:
        return True  # the stream ends when the shell does

    def exchange(self, pending: bytearray, wait: float, streams: set[int]) -> list[tuple[int, bytes]]:
        if pending:
            try:
                self.sock.settimeout(SEND_TIMEOUT_S)
                self.sock.sendall(pending)
            except OSError:
                return [(1, b""), (2, b"")]
            pending.clear()
        try:
            self.sock.settimeout(max(wait, 0.001))
            chunk = self.sock.recv(_RECV)
        except socket.timeout:
            return []
        except OSError:
            chunk = b""
        if not chunk:
            return [(1, b""), (2, b"")]
        buf = self._buf
        buf += chunk
        frames = []
        while len(buf) >= 8:
            size = int.from_bytes(buf[4:8], "big")
            if len(buf) < 8 + size:
                break
            if size:  # an empty frame is no news (b"" would read as the stream's end)
                frames.append((1 if buf[0] == 1 else 2, bytes(buf[8:8 + size])))
            del buf[:8 + size]
        return frames

