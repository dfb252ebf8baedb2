"""The persistent-shell protocol: one long-lived bash, commands framed by end markers.

One driver, `ShellSession`, for every backend; a backend hands it a small `Transport` that moves
bytes to the shell's stdin and from its stdout and stderr and can kill a command: `Pipes` for a
bash whose three pipes we hold (bwrap), docker.py's exec socket (Docker's multiplexed stream).
Each command goes in as `eval $'<quoted text>'` on one line, so an unbalanced quote or a
syntax error stays inside eval and cannot swallow the end marker (not inside `{ ...; }`: bash
5.2 loses its place in the input when an eval inside a group fails to parse). After the command the shell
prints a marker line with the exit code on stdout and a marker on stderr; the reader waits for
both, so the two streams are complete and kept apart. The token is random per session, so no
output can fake it.

Limits are enforced on this side: each stream keeps its head and tail up to the cap and drops the
middle (memory stays bounded under a `yes` flood); past `kill_after` bytes, or at the timeout,
the transport's `kill_command` kills what the command started while the shell lives on. If the
marker still does not come (a builtin loop in the shell itself), or the shell's output ends, the
session is marked broken and the backend restarts the shell.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import secrets
import select
import time
from typing import Callable, Protocol

from envs.sandbox.protocol import ExecResult

_CHUNK = 1 << 16
GRACE_S = 2.0  # after a kill, how long to wait for the shell's end marker
_KILL_REPORT = re.compile(rb"(?m)^[^\n]*: line \d+: +\d+ Killed ")
TICK_S = 0.25  # how often a quiet command checks that the shell still lives


def bash_quote(text: str) -> str:
    """`text` as a bash ANSI-C string ($'...') that survives any byte, quote or newline."""
    try:
        raw = text.encode("utf-8", "surrogateescape")  # bytes smuggled in a str come back out
    except UnicodeEncodeError:  # a lone surrogate from JSON ("\\ud800")
        raw = text.encode("utf-8", "replace")
    out = ["$'"]
    for ch in raw:
        if ch in (0x27, 0x5C):  # ' and backslash
            out.append("\\" + chr(ch))
        elif 0x20 <= ch < 0x7F:
            out.append(chr(ch))
        elif ch == 0:
            continue  # bash strings cannot hold NUL
        else:
            out.append(f"\\x{ch:02x}")
    out.append("'")
    return "".join(out)


# Sent once to a new shell: its own chatter ("Killed ...", job notices) goes to /dev/null, and
# commands get the real stderr as fd 2 through fd 9 (see `frame_command`).
SHELL_INIT = b"exec 9>&2 2>/dev/null\n"


def cpu_limited(command: str, cpu_s: float, grace_s: int) -> tuple[str, int]:
    """`command` run in a subshell under a CPU-time limit (the kernel's RLIMIT_CPU), and the whole
    seconds it may compute. A subshell, so the sandbox's persistent shell keeps its own limits;
    the hard limit `grace_s` above the soft one, so a process gets SIGXCPU (exit status 152,
    bash names it) before SIGKILL."""
    cpu = max(1, math.ceil(cpu_s))
    return f"( ulimit -t {cpu + grace_s} && ulimit -S -t {cpu} && exec {command} )", cpu


def frame_command(command: str, tag: str, workdir: str | None = None, feeds_stdin: bool = False) -> bytes:
    """The line that runs `command` in a shell set up with SHELL_INIT, then prints the end
    markers: "\\n<tag><exit code>\\n" on stdout and "\\n<tag>\\n" on stderr. The command reads
    /dev/null unless `feeds_stdin` (then it reads what is written after the line)."""
    redirect = "" if feeds_stdin else " </dev/null"
    run = f"eval {bash_quote(command)} 2>&9{redirect}; __ocr=$?"
    if workdir:  # run there without moving the shell's own cwd (as `docker exec -w` does)
        run = f'__ocd=$PWD; builtin cd -- {bash_quote(workdir)} 2>&9 && {run}; builtin cd -- "$__ocd"'
    return f"{run}; printf '\\n{tag}%d\\n' \"$__ocr\"; printf '\\n{tag}\\n' >&9\n".encode()


# What a fork carries of a shell (envs/sandbox/protocol.py, `fork`): its working directory and its
# exported variables. Plain shell variables, functions, aliases and running jobs stay behind.
STATE_COMMAND = "builtin printf '%s\\0' \"$PWD\"; builtin export -p"


def restore_command(state: str) -> str:
    """The command that gives a new shell the state STATE_COMMAND printed in another: every
    exported variable of its own is dropped (readonly ones stay), the other's are declared, then
    it moves to the other's directory."""
    cwd, _, exports = state.partition("\0")
    return ('for __v in $(builtin compgen -e); do builtin unset "$__v" 2>/dev/null; done; builtin unset __v\n'
            f"{exports}\nbuiltin cd -- {bash_quote(cwd)}")


def exec_result(raw: RawResult, max_output: int, shell_restarted: bool) -> ExecResult:
    """The protocol's ExecResult for a raw result (text decoded, the output kill explained)."""
    stderr = raw.stderr.decode("utf-8", "replace")
    if raw.output_killed:
        stderr += f"\n[output limit: the command was killed after printing over {kill_threshold(max_output)} bytes]"
    return ExecResult(
        stdout=raw.stdout.decode("utf-8", "replace"),
        stderr=stderr,
        exit_code=raw.exit_code,
        timed_out=raw.timed_out,
        truncated=raw.truncated,
        duration_s=raw.duration_s,
        shell_restarted=shell_restarted,
    )


def kill_threshold(max_output: int) -> int:
    """Bytes of one stream past which a command is killed for flooding."""
    return max(16 * max_output, 1 << 20)


class _Capture:
    """One output stream of one command: head and tail up to `cap` bytes, until its marker."""

    __slots__ = ("marker", "cap", "head", "data", "dropped", "end")

    def __init__(self, marker: bytes, cap: int):
        self.marker = marker
        self.cap = cap
        self.head = b""  # set once the stream outgrows the cap
        self.data = bytearray()  # everything after the head (the tail once trimmed)
        self.dropped = 0  # bytes dropped between head and tail
        self.end = -1  # index of the marker in data, once seen

    @property
    def total(self) -> int:
        return len(self.head) + self.dropped + len(self.data)

    def feed(self, chunk: bytes) -> bool:
        if self.end >= 0:  # the rest of the marker line (the exit code)
            self.data += chunk
            return True
        start = max(0, len(self.data) - len(self.marker))
        self.data += chunk
        i = self.data.find(self.marker, start)
        if i >= 0:
            self.end = i
            return True
        keep = self.cap - self.cap // 2 + len(self.marker) + 64
        if len(self.data) > self.cap + len(self.marker) + 64:
            if not self.head and not self.dropped:
                self.head = bytes(self.data[: self.cap // 2])
                del self.data[: self.cap // 2]
            cut = len(self.data) - keep
            if cut > 0:
                del self.data[:cut]
                self.dropped += cut
        return False

    def output(self) -> tuple[bytes, bool]:
        """(the kept output, whether the middle was cut)."""
        body = bytes(self.data[: self.end]) if self.end >= 0 else bytes(self.data)
        tail_len = self.cap - self.cap // 2
        if not self.head and not self.dropped and len(body) <= self.cap:
            return body, False
        head = self.head or body[: self.cap // 2]
        rest = body if self.head else body[self.cap // 2 :]
        dropped = self.dropped + max(0, len(rest) - tail_len)
        tail = rest[-tail_len:] if tail_len else b""
        note = f"\n[... {dropped} bytes of output cut ...]\n".encode()
        return head + note + tail, True


@dataclasses.dataclass
class RawResult:
    stdout: bytes
    stderr: bytes
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False
    output_killed: bool = False  # the command was killed for flooding output
    shell_exited: bool = False  # the shell's output streams ended (the command ran `exit`, or it was killed)
    shell_lost: bool = False  # the shell did not finish the command (it ended or stopped answering)
    duration_s: float = 0.0


class Transport(Protocol):
    """How a ShellSession reaches its bash: a backend's pipes (`Pipes`) or Docker's exec socket."""

    def exchange(self, pending: bytearray, wait: float, streams: set[int]) -> list[tuple[int, bytes]]:
        """Write what can be written now of `pending` (deleting it from the front), then return the
        output of `streams` (1: stdout, 2: stderr) that arrives within `wait` s as (stream, bytes)
        pairs; b"" says that stream ended. [] when nothing came."""
        ...

    def kill_command(self) -> bool:
        """Kill what the running command started, not the shell; False if the kill could not run."""
        ...

    def shell_alive(self) -> bool:
        """Whether the shell still runs (asked when the output is quiet: cheap)."""
        ...


class ShellSession:
    """Drives one bash over a transport. Not thread-safe: one command at a time."""

    def __init__(self, transport: Transport):
        self.transport = transport
        self.token = "__OCM_" + secrets.token_hex(8)
        self.seq = 0
        self.broken = False  # the shell ended or stopped answering: the backend must restart it
        self._init = SHELL_INIT  # goes in ahead of the first command

    def run(
        self,
        command: str,
        timeout: float,
        max_output: int,
        workdir: str | None = None,
        stdin_data: bytes | None = None,
        kill: bool = True,
    ) -> RawResult:
        """Run one command. `stdin_data` is fed to the command (else it reads /dev/null). Without
        `kill` (a shell's own start) neither the timeout nor a flood kills anything: the timeout
        gives up on the shell."""
        if self.broken:
            raise RuntimeError("shell session is broken; restart the shell")
        self.seq += 1
        tag = f"{self.token}:{self.seq}:"
        pending = bytearray(self._init + frame_command(command, tag, workdir, feeds_stdin=stdin_data is not None))
        pending += stdin_data or b""
        self._init = b""
        out = _Capture(f"\n{tag}".encode(), max_output)
        err = _Capture(f"\n{tag}\n".encode(), max_output)
        open_streams = {1, 2}
        kill_after = kill_threshold(max_output)
        t0 = time.monotonic()
        deadline = t0 + timeout
        killed_at: float | None = None
        timed_out = output_killed = False
        while not _answered(out, err, open_streams):
            now = time.monotonic()
            if killed_at is None and now >= deadline:
                if not kill:
                    break
                timed_out, killed_at = True, now
                if not self.transport.kill_command():
                    break  # the kill cannot even run: the backend recovers
            elif killed_at is not None and now >= killed_at + GRACE_S:
                break  # the shell itself does not come back
            until = deadline if killed_at is None else killed_at + GRACE_S
            chunks = self.transport.exchange(pending, min(TICK_S, max(0.0, until - now)), open_streams)
            if not chunks and (killed_at is not None or not self.transport.shell_alive()):
                # Killed, but the command list goes on (`sleep 9; sleep 9`): kill what follows.
                # Or the shell ended (`exit`) and what it left running holds its output open.
                self.transport.kill_command()
            for stream, chunk in chunks:
                if not chunk:
                    open_streams.discard(stream)
                    continue
                cap = out if stream == 1 else err
                cap.feed(chunk)
                if killed_at is None and kill and cap.total > kill_after:
                    output_killed, killed_at = True, time.monotonic()
                    self.transport.kill_command()
            if not open_streams:
                break
        exited = not open_streams
        answered = not exited and _answered(out, err, open_streams)
        self.broken = not answered
        out_b, out_trunc = out.output()
        err_b, err_trunc = err.output()
        if killed_at is not None:  # drop bash's report of the kill (it repeats the whole command)
            m = _KILL_REPORT.search(err_b)
            if m:
                err_b = err_b[: m.start()]
        return RawResult(
            stdout=out_b,
            stderr=err_b,
            exit_code=None if timed_out or output_killed or not answered else _exit_code(out),
            timed_out=timed_out,
            truncated=out_trunc or err_trunc or output_killed,
            output_killed=output_killed,
            shell_exited=exited,
            shell_lost=not answered,
            duration_s=time.monotonic() - t0,
        )


class Pipes:
    """A Transport over a bash's stdin, stdout and stderr pipe fds (bwrap's shell)."""

    def __init__(self, stdin_fd: int, stdout_fd: int, stderr_fd: int,
                 kill_command: Callable[[], None], shell_alive: Callable[[], bool]):
        self.stdin_fd = stdin_fd
        self.fds = {1: stdout_fd, 2: stderr_fd}
        self._kill = kill_command  # a kill from the host: it always runs
        self._alive = shell_alive
        for fd in (stdin_fd, stdout_fd, stderr_fd):
            os.set_blocking(fd, False)

    def kill_command(self) -> bool:
        self._kill()
        return True

    def shell_alive(self) -> bool:
        return self._alive()

    def exchange(self, pending: bytearray, wait: float, streams: set[int]) -> list[tuple[int, bytes]]:
        poller = select.poll()
        stream_of = {self.fds[s]: s for s in streams}
        for fd in stream_of:
            poller.register(fd, select.POLLIN)
        if pending:
            poller.register(self.stdin_fd, select.POLLOUT)
        chunks = []
        for fd, ev in poller.poll(wait * 1000):
            if fd == self.stdin_fd:
                if ev & (select.POLLERR | select.POLLHUP):
                    pending.clear()  # the shell closed its input: nothing more goes in
                    continue
                try:
                    del pending[: os.write(fd, pending[:_CHUNK])]
                except BlockingIOError:
                    pass
                except OSError:
                    pending.clear()
                continue
            try:
                chunks.append((stream_of[fd], os.read(fd, _CHUNK)))
            except BlockingIOError:
                pass
        return chunks


def _answered(out: _Capture, err: _Capture, open_streams: set[int]) -> bool:
    """Each stream showed its marker (or ended) and stdout's marker line is whole."""
    return (out.end >= 0 or 1 not in open_streams) and (err.end >= 0 or 2 not in open_streams) and _has_rc(out)


def _has_rc(cap: _Capture) -> bool:
    """The stdout marker is complete once its exit-code line ends with a newline."""
    return cap.end >= 0 and cap.data.find(b"\n", cap.end + len(cap.marker)) >= 0


def _exit_code(cap: _Capture) -> int | None:
    if not _has_rc(cap):
        return None
    start = cap.end + len(cap.marker)
    stop = cap.data.find(b"\n", start)
    try:
        return int(cap.data[start:stop])
    except ValueError:
        return None
