"""Disk caps for Docker sandboxes where the kernel cannot enforce them: the fallback, and a poll.

`Limits.disk_mb` binds in the kernel through `storage_opt` on xfs with project quotas, or as the
size of a file system per container (layerfs.py: needs the engine on this host and root). Elsewhere
(another host's engine, no root, no loop devices) three things hold it: seccomp.py's filter refuses fallocate(2), so a sandbox takes disk only by writing
it, at the speed of writing; the kernel's RLIMIT_FSIZE (docker.py sets it to the cap) refuses to
grow any one file past the cap; and this watchdog sums the disk blocks of each local container's
writable layer (each entry at least one block, so empty files count) and kills a container
past its cap, recording why (`reason`), so the sandbox's next error says "wrote past
its disk cap" instead of a bare stop. A sum runs every POLL_S, and at once when the data root's
free space falls by the room left under the nearest cap, so the overshoot is mostly what lands
while the engine kills the container: 10 to 140 MB past a 256 MB cap with 8 writers in parallel
on the reference host (docs/threat_model.md).

A poll can be outrun: on a loaded host the free disk fell by 1,745 MB (other writers included)
while parallel writers filled a sandbox capped at 256 MB, before the kill landed. Only the local engine's layers are readable here: a remote engine's
containers get the per-file cap (and the seccomp filter) alone.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable

POLL_S = 0.25  # every layer is summed at least this often
TICK_S = 0.02  # the data root's free space is read this often: a drop past the nearest cap sums at once
_BLOCK = 4096

_lock = threading.Lock()
_watched: dict[str, tuple[str, int, Callable[[], None]]] = {}  # container id -> (upper dir, cap bytes, kill)
_reasons: dict[str, str] = {}  # container id -> why the watchdog stopped it
_thread: threading.Thread | None = None


def usage(path: str) -> int:
    """Bytes of disk the files under `path` hold (allocated blocks: a sparse file counts what it
    uses), each entry at least one block: an inode is disk too, and empty files would otherwise
    use up the host's inodes unseen."""
    total = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += max(st.st_blocks * 512, _BLOCK)
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue  # removed meanwhile
    return total


def watch(cid: str, upper_dir: str, cap_mb: int, kill: Callable[[], None]) -> bool:
    """Watch container `cid`'s writable layer; False where it is not on this host's disk."""
    global _thread
    if not os.path.isdir(upper_dir):
        return False
    with _lock:
        _watched[cid] = (upper_dir, cap_mb << 20, kill)
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_loop, name="sandbox-diskwatch", daemon=True)
            _thread.start()
    return True


def reason(cid: str) -> str | None:
    """Why the watchdog stopped container `cid`, if it did."""
    with _lock:
        return _reasons.get(cid)


def _free(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _loop() -> None:
    stop = threading.Event()
    # the last sum: when it ended, how long it took, the free space as it began, the least room left under a cap
    ended, took, free_then, headroom = 0.0, 0.0, None, 0
    while not stop.wait(TICK_S):
        with _lock:
            items = list(_watched.items())
        if not items:
            continue
        free = _free(items[0][1][0])  # the engine's data root, which holds every local layer
        fell = free is not None and free_then is not None and free_then - free >= headroom
        # a drop sums again at once, yet the sums never take more than half the time (other
        # writers on the host drop it too, and the nearest cap may stay near)
        if time.monotonic() - ended < (took if fell else POLL_S):
            continue
        started, free_then, headroom = time.monotonic(), free, 1 << 62
        for cid, (upper, cap, kill) in items:
            if not os.path.isdir(upper):  # container removed
                with _lock:
                    _watched.pop(cid, None)
                    _reasons.pop(cid, None)
                continue
            used = usage(upper)
            if used <= cap:
                headroom = min(headroom, cap - used)
                continue
            with _lock:
                _watched.pop(cid, None)
                _reasons[cid] = (f"the sandbox wrote past its disk cap ({used >> 20} MB of {cap >> 20} MB) "
                                 "and was stopped")
            try:
                kill()
            except Exception:
                pass  # it is gone already, or the engine failed: the exit cleanup removes it
        ended = time.monotonic()
        took = ended - started
