"""Find and kill the processes of our browsers.

Each chromedriver is started in a session of its own with MARKER_VAR=`marker(name)`
("<owner pid>:<name>.") in its environment. Chromium's helpers reach us by one of two threads: the zygotes and renderers
stay in chromedriver's session but are started with a cleaned environment, while the crashpad
handlers keep the environment but start sessions of their own. A browser's processes are
therefore the marked ones plus every process in a marked process's session.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

MARKER_VAR = "OPENCLAW_GUI_BROWSER"
_NEEDLE = MARKER_VAR.encode() + b"="


def _marker_of(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return None
    for item in env.split(b"\0"):
        if item.startswith(_NEEDLE):
            return item[len(_NEEDLE):].decode(errors="replace")
    return None


def _state_and_session(pid: int) -> tuple[str, int] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return fields[0], int(fields[3])


def _live_pids() -> dict[int, int]:
    """pid -> session id of every process that is not a zombie."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _state_and_session(int(entry.name))
            if st is not None and st[0] not in ("Z", "X"):
                out[int(entry.name)] = st[1]
    return out


def marked_pids(prefix: str = "") -> dict[int, str]:
    """pid -> marker of every live process whose marker starts with `prefix`."""
    found = {}
    for pid in _live_pids():
        marker = _marker_of(pid)
        if marker is not None and marker.startswith(prefix):
            found[pid] = marker
    return found


def browser_pids(prefix: str = "", sessions: set[int] | None = None) -> set[int]:
    """Live processes of the browsers whose marker starts with `prefix` (see module doc).
    `sessions` collects the session ids seen, so a caller can keep killing a session whose
    marked leader is already gone."""
    sessions = set() if sessions is None else sessions
    live = _live_pids()
    marked = {pid for pid in live if (m := _marker_of(pid)) is not None and m.startswith(prefix)}
    sessions.update(live[pid] for pid in marked)
    return marked | {pid for pid, sid in live.items() if sid in sessions and sid != 0}


def kill_marked(prefix: str, timeout_s: float = 10.0) -> int:
    """SIGKILL every process of the browsers whose marker starts with `prefix` and wait until
    none is left (a dying browser may fork one last helper, so this repeats). Returns how many
    were alive at first."""
    deadline = time.monotonic() + timeout_s
    sessions: set[int] = set()
    first = None
    while True:
        pids = browser_pids(prefix, sessions) - {os.getpid()}
        if first is None:
            first = len(pids)
        if not pids:
            return first
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"browser processes {sorted(pids)} survived SIGKILL for {timeout_s} s")
        time.sleep(0.02)


def owner_prefix(pid: int | None = None) -> str:
    """The marker prefix shared by every browser a process started."""
    return f"{os.getpid() if pid is None else pid}:"


def marker(name: str) -> str:
    """The marker of one browser of this process. The closing dot keeps one browser's marker
    from being a prefix of another's ("1." is not a prefix of "10."), so killing browser 1
    never kills browser 10."""
    return f"{owner_prefix()}{name}."


def sweep_orphans() -> int:
    """Kill browsers whose owner process is gone (a runner killed before its reaper could act)."""
    killed = 0
    for marker in set(marked_pids().values()):
        owner = marker.split(":", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():  # a marker naming no pid is not ours
            killed += kill_marked(owner_prefix(int(owner)))
    return killed
