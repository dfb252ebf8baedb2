"""A watchdog process that kills a runner's browsers when the runner dies, however it dies.

Started once per runner (`start`), in its own session so Ctrl-C reaches only the runner. It
blocks reading a pipe whose write end only the runner holds; end of file means the runner
exited (normally, by signal, by SIGKILL or by a crash), and then every process carrying the
runner's marker is killed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
_lock = threading.Lock()
_proc: subprocess.Popen | None = None
_owner = 0  # the pid _proc watches (a forked child needs a reaper of its own)


def start() -> None:
    """Start this process's reaper if it is not running yet (idempotent, thread-safe)."""
    global _proc, _owner
    with _lock:
        if _proc is not None and _owner == os.getpid() and _proc.poll() is None:
            return
        _owner = os.getpid()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}
        env.pop("OPENCLAW_GUI_BROWSER", None)  # the reaper itself must not look like a browser
        _proc = subprocess.Popen(
            [sys.executable, "-m", "envs.gui.reaper", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, env=env,
        )


def _main(owner: int) -> None:
    from envs.gui.procs import kill_marked, owner_prefix

    try:
        while sys.stdin.buffer.read(4096):  # the runner never writes; we wait for EOF
            pass
    finally:
        kill_marked(owner_prefix(owner), timeout_s=30.0)


if __name__ == "__main__":
    _main(int(sys.argv[1]))
