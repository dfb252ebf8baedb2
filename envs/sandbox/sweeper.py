"""Who owns a container, and removing what dead runs left and what this run made.

Every container carries labels: the run (a random id per process), the owner's pid, the pid's
start time (so a reused pid is not mistaken for the owner), the host, and a deadline. `sweep()`
(run once when a process first opens a pool) removes containers whose owner on this host is
gone, or whose deadline passed on any host, on every engine that answers. `install_exit_cleanup()`
makes normal exit, SIGINT and SIGTERM remove every container this process made on every engine
it was given, then chains to the previous handlers. `sigterm_as_sigint()`, called first by the
programs (experiments.run, experiments.bench), makes SIGTERM stop them exactly as Ctrl-C does,
whichever thread opens the first pool later.

CLI: `python -m envs.sandbox.sweeper [--all] [--host URL ...]` (--all: every openclaw container,
owner alive or not; --host: the engines to sweep, default the local one).
"""
from __future__ import annotations

import argparse
import atexit
import os
import signal
import socket
import threading
import time
import uuid
from typing import Any, Callable

from envs.sandbox import engine
from envs.sandbox.container import remove_many
from envs.sandbox.engine import client

L_RUN, L_PID, L_START, L_HOST, L_DEADLINE = (
    "openclaw.run", "openclaw.pid", "openclaw.pid_start", "openclaw.host", "openclaw.deadline")
DEFAULT_DEADLINE_S = 24 * 3600.0

_identity: tuple[int, str] | None = None  # (pid, run id): a forked child gets a run of its own
_shutdown_hooks: list[Callable[[], None]] = []
_atexit_pid = 0  # the process that registered the atexit cleanup
_signals_pid = 0  # the process that installed the signal handlers
_lock = threading.Lock()


def _pid_start(pid: int) -> str:
    """The process's start time (clock ticks since boot), or "" if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return ""
    return st[st.rfind(")") + 2:].split()[19]


def run_id() -> str:
    global _identity
    if _identity is None or _identity[0] != os.getpid():
        _identity = (os.getpid(), uuid.uuid4().hex[:12])
    return _identity[1]


def labels(deadline_s: float = DEFAULT_DEADLINE_S) -> dict[str, str]:
    """The ownership labels for a container this process creates now."""
    return {
        L_RUN: run_id(),
        L_PID: str(os.getpid()),
        L_START: _pid_start(os.getpid()),
        L_HOST: socket.gethostname(),
        L_DEADLINE: f"{time.time() + deadline_s:.0f}",
    }


def owner_gone(lab: dict[str, str], now: float) -> bool:
    """Whether a container's run is over: past its deadline, or (on this host) its process gone."""
    try:
        if float(lab.get(L_DEADLINE, "inf")) < now:
            return True
    except ValueError:
        return True
    if lab.get(L_HOST) != socket.gethostname():
        return False  # another host's run: only its deadline tells
    pid = lab.get(L_PID, "")
    return not pid.isdigit() or _pid_start(int(pid)) != lab.get(L_START)


def containers(run: str | None = None, url: str | None = None) -> list[dict[str, Any]]:
    """The openclaw containers on engine `url` (None: the primary), of one run or of all."""
    label = f"{L_RUN}={run}" if run else L_RUN
    return client(url).api.containers(all=True, filters={"label": label})


def sweep(everything: bool = False) -> list[str]:
    """Remove containers left by dead runs (or every openclaw container with `everything`,
    this process's own excepted) on every engine that answers. Returns the removed ids."""
    now = time.time()
    mine = run_id()
    removed: list[str] = []
    for url in engine.live_hosts(fresh=True):
        stale = [
            c["Id"] for c in containers(url=url)
            if c["Labels"].get(L_RUN) != mine and (everything or owner_gone(c["Labels"], now))
        ]
        remove_many(stale, url)
        removed += stale
    return removed


def remove_all_mine() -> int:
    """Stop this process's pools, then remove every container labelled with this run on every
    engine this process was given that answers (an unreachable engine's are left to their
    deadline: any later sweep there removes them)."""
    for hook in list(_shutdown_hooks):
        try:
            hook()
        except Exception:
            pass  # cleanup goes on: the containers matter more than a pool's state
    removed = 0
    for url in engine.seen():
        try:
            if engine.answers(url, warn=False):
                removed += remove_many([c["Id"] for c in containers(run_id(), url)], url)
        except Exception:
            pass  # this engine went away meanwhile; the others still get cleaned
    return removed


def on_shutdown(hook: Callable[[], None]) -> None:
    """Run `hook` (stop creating containers) before the exit cleanup removes them."""
    _shutdown_hooks.append(hook)


def _sigterm_as_sigint(num: int, frame: Any) -> None:
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)  # asyncio.run's (cancels the main task), the exit cleanup's, Python's
    else:  # SIGINT ignored (nohup) or reset: a stop request all the same
        raise KeyboardInterrupt


def sigterm_as_sigint() -> None:
    """For a program's entry point, from the main thread, before it starts anything: SIGTERM then
    does whatever Ctrl-C does when it arrives, so `finally` blocks, the program's "stopped" line
    and the exit cleanup run. SIGTERM's default is a silent death that skips atexit, and the exit
    cleanup's own handlers exist only where the first pool was opened on the main thread."""
    if signal.getsignal(signal.SIGTERM) != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, _sigterm_as_sigint)


def install_exit_cleanup() -> None:
    """atexit + SIGINT/SIGTERM handlers that remove this run's containers, once per process.
    Signal handlers can only be set from the main thread: a call from another thread sets the
    atexit part, and the next call from the main thread adds the handlers."""
    global _atexit_pid, _signals_pid
    owner = os.getpid()
    with _lock:
        if _atexit_pid != owner:
            _atexit_pid = owner
            atexit.register(lambda: os.getpid() == owner and remove_all_mine())
        if _signals_pid == owner or threading.current_thread() is not threading.main_thread():
            return
        _signals_pid = owner
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)
        if previous == signal.SIG_IGN:
            continue  # started ignoring it (nohup, a background job): the run goes on, so must its sandboxes
        if previous is _sigterm_as_sigint:
            continue  # SIGTERM goes through SIGINT's handler, which cleans up

        def handler(num: int, frame: Any, previous: Any = previous) -> None:
            if os.getpid() == owner:
                remove_all_mine()
            if callable(previous):
                previous(num, frame)  # e.g. Python's SIGINT -> KeyboardInterrupt
            elif previous == signal.SIG_DFL:
                signal.signal(num, signal.SIG_DFL)
                os.kill(os.getpid(), num)

        signal.signal(signum, handler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.sandbox.sweeper")
    ap.add_argument("--all", action="store_true", help="remove every openclaw container, owner alive or not")
    ap.add_argument("--host", action="append", default=[], help="an engine URL to sweep (repeat for several; default: the local engine)")
    args = ap.parse_args(argv)
    engine.set_hosts(args.host)
    removed = sweep(everything=args.all)
    print(f"removed {len(removed)} container(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
