"""The `python` tool: run the agent's code in a sandbox, with time, memory and output limits.

Its time limit is CPU time (`timeout` seconds, the kernel's RLIMIT_CPU), so a loaded machine
(dozens of envs on two cores) never stops code that would finish; code that waits without
computing is stopped at WALL_FACTOR x `timeout` of wall time.

Each call runs a fresh `python3 -I` inside the sandbox (default backend bwrap; any backend of
`envs.sandbox.open_sandbox`). The code travels as an argument of a small runner that first
blocks a denylist of modules (network, processes, native code) with an import hook, so
`import socket` fails with a clear message inside the sandboxed interpreter itself. The
sandbox is the isolation; the denylist states the tool's policy and makes breaking it visible.
One sandbox serves every episode of an env; one that dies fails the call in progress
(SandboxError: the env reports infra_error) and is replaced for the next episode.
"""
from __future__ import annotations

import dataclasses
import signal

from envs.sandbox import Limits, Sandbox, SandboxError, open_sandbox
from envs.sandbox.shell import bash_quote, cpu_limited

DENIED_MODULES = (
    "socket", "_socket", "ssl", "_ssl", "select", "selectors", "asyncio",
    "subprocess", "_posixsubprocess", "pty", "multiprocessing", "_multiprocessing", "concurrent",
    "ctypes", "_ctypes", "cffi", "mmap", "resource",
    "urllib", "http", "ftplib", "smtplib", "poplib", "imaplib", "telnetlib", "xmlrpc", "webbrowser",
)
FORBIDDEN_EXIT = 86  # the runner's exit code for a blocked import
MAX_CODE_CHARS = 100_000  # one argv string holds at most 128 KiB
WALL_FACTOR = 5  # wall-time backstop, in multiples of the CPU-time limit

# Runs inside the sandbox: argv[1] is the agent's code.
RUNNER = f"""
import sys, os, traceback
DENIED = {DENIED_MODULES!r}
class Blocked(ImportError):
    pass
class Denylist:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in DENIED:
            raise Blocked(f"import of {{name!r}} is not allowed in this sandbox "
                          "(blocked: network, processes and native code modules)")
        return None
for _m in list(sys.modules):
    if _m.split('.')[0] in DENIED:
        del sys.modules[_m]
sys.meta_path.insert(0, Denylist())
def _denied(*a, **k):
    raise PermissionError("starting processes is not allowed in this sandbox")
for _mod in (os, sys.modules.get('posix')):
    for _f in ('system', 'popen', 'fork', 'forkpty', 'execv', 'execve', 'execl', 'execle', 'execlp',
               'execlpe', 'execvp', 'execvpe', 'spawnv', 'spawnve', 'spawnl', 'spawnle',
               'posix_spawn', 'posix_spawnp'):
        if _mod is not None and hasattr(_mod, _f):
            setattr(_mod, _f, _denied)
code = sys.argv[1]
g = {{'__name__': '__main__', '__builtins__': __builtins__}}
try:
    exec(compile(code, '<code>', 'exec'), g)
except Blocked as e:
    print(f"ImportError: {{e}}", file=sys.stderr)
    sys.exit({FORBIDDEN_EXIT})
except SystemExit:
    raise
except BaseException as e:
    tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
    traceback.print_exception(type(e), e, tb)
    sys.exit(1)
"""


@dataclasses.dataclass
class ToolRun:
    """The outcome of one python call, as the env reports it in NextState.data."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False
    forbidden_import: bool = False
    shell_restarted: bool = False
    error: str | None = None  # short: the exception line, "timeout", "output limit", ...

    @property
    def limit_hit(self) -> bool:
        """A limit of the tool fired (the env reports env_error)."""
        return self.timed_out or self.truncated or self.forbidden_import


def _error_line(stderr: str) -> str | None:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else None


class PythonTool:
    """Runs code in one sandbox, opened on first use and replaced after it dies."""

    def __init__(
        self,
        backend: str = "bwrap",
        image: str | None = None,
        limits: Limits = Limits(memory_mb=1024, pids=64, cpus=1.0, disk_mb=256),
        timeout: float = 10.0,
        max_output: int = 8192,
    ):
        self.backend, self.image, self.limits = backend, image, limits
        self.timeout, self.max_output = float(timeout), int(max_output)
        self._sandbox: Sandbox | None = None
        self.used = False  # something ran since the last reset

    def _box(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = open_sandbox(self.backend, self.image, self.limits)
        elif not self._sandbox.is_alive():
            # Died under the episode: say so (infra_error); the next episode gets a new one.
            self.close()
            raise SandboxError("the sandbox died")
        return self._sandbox

    def run(self, code: str) -> ToolRun:
        """Run `code`. Raises SandboxError when the sandbox itself fails (then it is replaced)."""
        if len(code) > MAX_CODE_CHARS:
            raise ValueError(f"code is {len(code)} characters; the limit is {MAX_CODE_CHARS}")
        command, cpu = cpu_limited(f"python3 -I -c {bash_quote(RUNNER)} {bash_quote(code)}", self.timeout, grace_s=1)
        try:
            self.used = True
            r = self._box().exec(command, timeout=WALL_FACTOR * self.timeout, max_output=self.max_output)
        except SandboxError:
            self.close()
            raise
        forbidden = r.exit_code == FORBIDDEN_EXIT
        out_of_cpu = r.exit_code == 128 + signal.SIGXCPU
        if out_of_cpu:
            error = f"timeout: the code computed for {cpu} s of CPU time and was stopped"
        elif r.timed_out:
            error = f"timeout: the code ran {WALL_FACTOR * self.timeout:g} s without finishing and was stopped"
        elif r.truncated and r.exit_code is None:
            error = "output limit: the code printed too much and was stopped"
        elif r.truncated:
            error = f"output limit: output longer than {self.max_output} bytes was cut in the middle"
        elif r.exit_code != 0:
            error = _error_line(r.stderr) or f"exit code {r.exit_code}"
        else:
            error = None
        return ToolRun(
            stdout=r.stdout, stderr=r.stderr, exit_code=r.exit_code, timed_out=r.timed_out or out_of_cpu,
            truncated=r.truncated, forbidden_import=forbidden, shell_restarted=r.shell_restarted, error=error,
        )

    def reset(self) -> None:
        """Clear files a previous episode left (best effort: a broken sandbox is just dropped)."""
        if self._sandbox is not None and not self._sandbox.is_alive():
            self.close()
        if self._sandbox is None or not self.used:
            return
        try:
            self._sandbox.exec("rm -rf -- ~/* ~/.[!.]* /tmp/* /tmp/.[!.]* 2>/dev/null; cd ~", timeout=10.0)
            self.used = False
        except SandboxError:
            self.close()

    def close(self) -> None:
        sb, self._sandbox = self._sandbox, None
        if sb is not None:
            try:
                sb.close()
            except SandboxError:
                pass
