"""Where agent code runs: the one interface every backend (docker, bwrap) implements.

Terminal, SWE and tool-call envs use only this protocol, so a backend is a config word.
Exec runs in one long-lived shell per sandbox: `cd` and `export` persist between calls.
A failure of the sandbox itself (it died, the daemon answered an error) raises
`SandboxError`; the env turns it into status infra_error. A command that is slow or loud is
not an error: its `ExecResult` says which limit fired. A sandbox stopped because the agent's
commands drove it past its disk cap raises `SandboxLimitError`: the env ends the episode as the
agent's failure (env_error, the fail outcome).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from envs.sandbox.verifier import Verification


class SandboxError(RuntimeError):
    """The sandbox or its backend failed (not the command): an infrastructure error."""


class SandboxLimitError(SandboxError):
    """The sandbox was stopped for what the agent's commands did (wrote past its disk cap)."""


@dataclasses.dataclass
class ExecResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when the command was killed by a limit
    timed_out: bool = False  # the command's timeout fired (it was killed, the shell lives on)
    truncated: bool = False  # output went past the cap; the kept part is the head and tail
    duration_s: float = 0.0
    shell_restarted: bool = False  # the shell had died and was restarted before this command

    @property
    def limit(self) -> str | None:
        """Which limit fired: "timeout", "output", or None."""
        if self.timed_out:
            return "timeout"
        if self.truncated:
            return "output"
        return None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits every backend enforces (defaults: no network, modest caps)."""

    memory_mb: int = 1024
    pids: int = 256
    cpus: float = 1.0
    network: bool = False
    disk_mb: int = 2048


@runtime_checkable
class Sandbox(Protocol):
    def exec(
        self,
        command: str,
        timeout: float = 30.0,
        max_output: int = 64 * 1024,
        workdir: str | None = None,
    ) -> ExecResult:
        """Run `command` in the sandbox's persistent shell."""
        ...

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None: ...

    def read_file(self, path: str, max_bytes: int = 16 * 1024 * 1024) -> bytes: ...

    def copy_in(self, local_dir: str, dest: str) -> None:
        """Copy a host folder's contents into `dest` inside the sandbox."""
        ...

    def verify(self, tests_dir: str, script: str, workdir: str, timeout: float) -> Verification:
        """End the agent's part and run a task's verifier out of its reach (verifier.py)."""
        ...

    def fork(self) -> Sandbox:
        """A new sandbox of the same image and limits holding a copy of this one's writable files
        and its shell's state (working directory, exported variables; not running processes).
        The two are independent from then on; the fork is closed like any sandbox."""
        ...

    def is_alive(self) -> bool: ...

    def close(self) -> None:
        """Free everything the sandbox holds. Safe to call twice."""
        ...
