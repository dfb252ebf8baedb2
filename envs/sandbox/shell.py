"""The persistent-shell protocol over pipes: one long-lived bash, commands framed by end markers.

Backend-neutral: a backend that can hand over a bash's stdin, stdout and stderr as file
descriptors (a bwrap child's pipes) drives it with `ShellSession.run`; one that reads another
transport (Docker's multiplexed exec socket) uses the pieces: SHELL_INIT, `frame_command`,
`_Capture`, `exec_result`. Each command goes in as `eval $'<quoted text>'` on one line, so an unbalanced quote or a
syntax error stays inside eval and cannot swallow the end marker (not inside `{ ...; }`: bash
5.2 loses its place in the input when an eval inside a group fails to parse). After the command the shell
prints a marker line with the exit code on stdout and a marker on stderr; the reader waits for
both, so the two streams are complete and kept apart. The token is random per session, so no
output can fake it.

Limits are enforced on this side: each stream keeps its head and tail up to the cap and drops the
middle (memory stays bounded under a `yes` flood); past `kill_after` bytes, or at the timeout,
the backend's `kill_command` kills what the command started while the shell lives on. If the
marker still does not come (a builtin loop in the shell itself), the session is marked broken so
the backend restarts the shell.
"""
from __future__ import annotations

import dataclasses
import os
import re
import secrets
import select
import time
from typing import Callable

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
    shell_exited: bool = False  # the shell ended (the command ran `exit`, or it was killed)
    duration_s: float = 0.0


class ShellSession:
    """Drives one bash over three pipe fds. Not thread-safe: one command at a time."""

    def __init__(
        self,
        stdin_fd: int,
        stdout_fd: int,
        stderr_fd: int,
        kill_command: Callable[[], None],
        shell_alive: Callable[[], bool],
    ):
        self.stdin_fd, self.stdout_fd, self.stderr_fd = stdin_fd, stdout_fd, stderr_fd
        self.kill_command = kill_command  # kill what the shell started, not the shell
        self.shell_alive = shell_alive
        os.write(stdin_fd, SHELL_INIT)
        os.set_blocking(stdin_fd, False)
        self.token = "__OCM_" + secrets.token_hex(8)
        self.seq = 0
        self.broken = False  # the shell ended or stopped answering: the backend must restart it
        for fd in (stdout_fd, stderr_fd):
            os.set_blocking(fd, False)

    def run(
        self,
        command: str,
        timeout: float,
        max_output: int,
        workdir: str | None = None,
        stdin_data: bytes | None = None,
    ) -> RawResult:
        """Run one command. `stdin_data` is fed to the command (else it reads /dev/null)."""
        if self.broken:
            raise RuntimeError("shell session is broken; restart the shell")
        self.seq += 1
        tag = f"{self.token}:{self.seq}:"
        line = frame_command(command, tag, workdir, feeds_stdin=stdin_data is not None)
        payload = line + (stdin_data or b"")
        out = _Capture(f"\n{tag}".encode(), max_output)
        err = _Capture(f"\n{tag}\n".encode(), max_output)
        kill_after = kill_threshold(max_output)
        t0 = time.monotonic()
        deadline = t0 + timeout
        killed_at: float | None = None
        timed_out = output_killed = False
        poller = select.poll()
        poller.register(self.stdout_fd, select.POLLIN)
        poller.register(self.stderr_fd, select.POLLIN)
        if payload:
            poller.register(self.stdin_fd, select.POLLOUT)
        open_fds = 2
        out_done = err_done = False
        exited = False
        while not (out_done and err_done and _has_rc(out)):
            now = time.monotonic()
            if killed_at is None and now >= deadline:
                timed_out = True
                killed_at = now
                self.kill_command()
            elif killed_at is not None and now >= killed_at + GRACE_S:
                self.broken = True  # the shell itself does not come back: restart it
                break
            wait_until = deadline if killed_at is None else killed_at + GRACE_S
            events = poller.poll(min(TICK_S, max(0.0, wait_until - now)) * 1000)
            if not events and (killed_at is not None or not self.shell_alive()):
                # Killed, but the command list goes on (`sleep 9; sleep 9`): kill what follows.
                # Or the shell ended (`exit`) and what it left running holds the pipes open.
                self.kill_command()
            for fd, ev in events:
                if fd == self.stdin_fd:
                    if ev & (select.POLLERR | select.POLLHUP):
                        poller.unregister(fd)
                        payload = b""
                        continue
                    try:
                        n = os.write(fd, payload[:_CHUNK])
                    except BlockingIOError:
                        continue
                    except (BrokenPipeError, OSError):
                        n = len(payload)
                    payload = payload[n:]
                    if not payload:
                        poller.unregister(fd)
                    continue
                try:
                    chunk = os.read(fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:  # EOF: the shell is gone
                    poller.unregister(fd)
                    open_fds -= 1
                    if fd == self.stdout_fd:
                        out_done = True
                    else:
                        err_done = True
                    continue
                if fd == self.stdout_fd:
                    out_done = out.feed(chunk) or out_done
                    cap = out
                else:
                    err_done = err.feed(chunk) or err_done
                    cap = err
                if killed_at is None and cap.total > kill_after:
                    output_killed = True
                    killed_at = time.monotonic()
                    self.kill_command()
            if open_fds == 0:
                exited = True
                self.broken = True
                break
        out_b, out_trunc = out.output()
        err_b, err_trunc = err.output()
        if killed_at is not None:  # drop bash's report of the kill (it repeats the whole command)
            m = _KILL_REPORT.search(err_b)
            if m:
                err_b = err_b[: m.start()]
        rc = _exit_code(out) if not exited else None
        if timed_out or output_killed:
            rc = None
        return RawResult(
            stdout=out_b,
            stderr=err_b,
            exit_code=rc,
            timed_out=timed_out,
            truncated=out_trunc or err_trunc or output_killed,
            output_killed=output_killed,
            shell_exited=exited or self.broken,
            duration_s=time.monotonic() - t0,
        )


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
