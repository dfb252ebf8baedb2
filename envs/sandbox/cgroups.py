"""Best-effort cgroup limits (memory, pids, CPU quota) for processes the host starts itself.

Used by the bwrap backend on top of its rlimits: rlimits bound each process, a cgroup bounds the
sandbox as a whole and is the only way to cap CPU share. Works on cgroup v1 (one hierarchy per
controller) and v2 (one unified tree, where we can only nest under our own cgroup if its
controllers can be delegated). Where nothing is writable (an unprivileged or locked-down host)
`create` returns None and the caller relies on rlimits alone.
"""
from __future__ import annotations

import itertools
import os
import time

from envs.sandbox.protocol import Limits

ROOT = "/sys/fs/cgroup"
PERIOD_US = 100_000
_serial = itertools.count()  # names unique within the process (threads create at once)


def _own_paths() -> dict[str, str]:
    """controller -> our own cgroup path ('' for the v2 unified tree)."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    return out


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class Group:
    """One cgroup (v2) or one per controller (v1) holding a sandbox's processes."""

    def __init__(self, dirs: list[str]):
        self.dirs = dirs

    def add(self, pid: int) -> None:
        for d in self.dirs:
            try:
                _write(f"{d}/cgroup.procs", str(pid))
            except OSError:
                pass

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer has killed in this group so far (0 where unknown)."""
        for d in self.dirs:
            for fname in ("memory.events", "memory.oom_control"):  # v2, v1
                try:
                    with open(f"{d}/{fname}") as f:
                        for line in f:
                            key, _, value = line.partition(" ")
                            if key == "oom_kill":
                                return int(value)
                except (OSError, ValueError):
                    continue
        return 0

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(50):  # rmdir fails while the killed processes are still exiting
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def create(prefix: str, limits: Limits) -> Group | None:
    """A new cgroup "<prefix>-<our pid>-<n>" with `limits`, or None where this host does not
    let us make one. Empty cgroups of the same prefix whose process is gone (left by a crashed
    run) are removed; a live process's are never touched, even while still empty."""
    try:
        own = _own_paths()
    except OSError:
        return None
    name = f"{prefix}-{os.getpid()}-{next(_serial)}"
    if os.path.exists(f"{ROOT}/cgroup.controllers"):
        return _create_v2(name, prefix, limits, own.get("", "/"))
    return _create_v1(name, prefix, limits, own)


def _owner_alive(entry: str, prefix: str) -> bool:
    """Whether the process named in cgroup `entry` ("<prefix>-<pid>-<n>") still runs."""
    pid = entry[len(prefix) + 1:].split("-", 1)[0]
    return pid.isdigit() and os.path.exists(f"/proc/{pid}")


def _sweep(parent: str, prefix: str) -> None:
    """Remove empty cgroups a crashed run left (same prefix, owner gone); busy ones refuse rmdir."""
    try:
        entries = os.listdir(parent)
    except OSError:
        return
    for e in entries:
        if e.startswith(prefix + "-") and not _owner_alive(e, prefix):
            _discard(f"{parent}/{e}")


def _discard(d: str) -> None:
    try:
        os.rmdir(d)
    except OSError:
        pass


def _create_v1(name: str, prefix: str, limits: Limits, own: dict[str, str]) -> Group | None:
    settings = {
        "memory": {"memory.limit_in_bytes": str(limits.memory_mb << 20)},
        "pids": {"pids.max": str(limits.pids)},
        "cpu": {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": str(max(1000, int(limits.cpus * PERIOD_US)))},
    }
    dirs = []
    for ctrl, files in settings.items():
        parent = f"{ROOT}/{ctrl}{own.get(ctrl, '/').rstrip('/')}"
        d = f"{parent}/{name}"
        _sweep(parent, prefix)
        try:
            os.mkdir(d)
        except OSError:
            continue
        try:
            for fname, value in files.items():
                _write(f"{d}/{fname}", value)
            dirs.append(d)
        except OSError:
            _discard(d)
    return Group(dirs) if dirs else None


def _create_v2(name: str, prefix: str, limits: Limits, own: str) -> Group | None:
    parent = f"{ROOT}{own.rstrip('/')}"
    d = f"{parent}/{name}"
    _sweep(parent, prefix)
    try:
        _write(f"{parent}/cgroup.subtree_control", "+memory +pids +cpu")
        os.mkdir(d)
    except OSError:
        return None  # our own cgroup holds processes, so it cannot delegate (v2's leaf rule)
    try:
        _write(f"{d}/memory.max", str(limits.memory_mb << 20))
        _write(f"{d}/pids.max", str(limits.pids))
        _write(f"{d}/cpu.max", f"{max(1000, int(limits.cpus * PERIOD_US))} {PERIOD_US}")
    except OSError:
        _discard(d)
        return None
    return Group([d])
