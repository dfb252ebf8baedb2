"""A Docker container's writable layer on a file system of its own, `Limits.disk_mb` in size: a
disk cap the kernel enforces, so no number of writers and no host load gets past it.

overlay2 keeps a container's changes in its layer folder (`diff`, and overlayfs' `work` beside it)
on the engine's data root. Docker caps that folder only on xfs with project quotas (`storage_opt
size`); this kernel has neither XFS nor ext4 quota support, and ext4 quotas would not bind anyway
(overlayfs writes with the engine's credentials, and CAP_SYS_RESOURCE passes them). So before the
container starts, `cap()` mounts over its layer folder a fresh ext4 of the cap's size, made with
what the folder held (`link`, `lower`, the empty `diff` and `work`). Every change then lands in
it, and a write past it fails with ENOSPC (`No space left on device`); the sandbox's `df /` shows
the cap. No blocks are reserved for root (the engine writes as root); the file system's own
tables take about 4% of it, and inodes are one per 16 KiB, so empty files run out too.

The ext4 lives in an unnamed sparse file (O_TMPFILE) beside the layers, held only by its loop
device: the host's disk gives only what the sandbox writes, and when the engine removes the
container (it unmounts what is mounted on a folder it removes) the loop device detaches and the
file is gone. Nothing is left to clean, whoever removes the container or whenever this process dies.

CLI: `python -m envs.sandbox.layerfs` checks that this host can do it (one line; exit 0 either way).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

INODE_BYTES = 16384  # one inode per this many bytes of the cap
TIMEOUT_S = 60.0  # mkfs and mount: a loaded host takes well under a second


@functools.cache
def unavailable() -> str | None:
    """Why this process cannot give layers a file system of their own; None where it can."""
    if os.geteuid() != 0:
        return "not root (mounting a file system per sandbox needs root)"
    if shutil.which("mkfs.ext4") is None:
        return "mkfs.ext4 is missing (Debian: apt-get install e2fsprogs)"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control is missing)"
    return None


def cap(layer_dir: str, size_mb: int) -> None:
    """Mount a fresh ext4 of `size_mb` over `layer_dir` holding what it held (owners, modes).
    Raises OSError saying what failed."""
    st = os.stat(layer_dir)
    fd = os.open(os.path.dirname(layer_dir), os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size_mb << 20)
        image = f"/proc/self/fd/{fd}"  # the child's: pass_fds keeps the number
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096", "-i", str(INODE_BYTES), "-O", "^has_journal",
              "-d", layer_dir, image], fd)
        _run(["mount", "-o", "loop", image, layer_dir], fd)
    finally:
        os.close(fd)  # the loop device holds the file now
    os.chown(layer_dir, st.st_uid, st.st_gid)  # the new root folder: mkfs gives it its own
    os.chmod(layer_dir, st.st_mode & 0o7777)


def _run(cmd: list[str], fd: int) -> None:
    try:
        r = subprocess.run(cmd, pass_fds=(fd,), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise OSError(f"{cmd[0]} did not finish in {TIMEOUT_S:.0f} s") from e
    if r.returncode != 0:
        raise OSError(f"{cmd[0]} failed: {(r.stderr or r.stdout).strip()[:300]}")


def check() -> str | None:
    """Cap a scratch folder at 8 MB and write 16 MB into it: None where the write stopped at the
    cap, else why this host cannot cap layers so."""
    if (why := unavailable()) is not None:
        return why
    folder = tempfile.mkdtemp(prefix="openclaw-layerfs-")
    try:
        try:
            cap(folder, 8)
        except OSError as e:
            return str(e)
        try:
            with open(os.path.join(folder, "fill"), "wb") as f:
                for _ in range(16):
                    f.write(bytes(1 << 20))
                f.flush()
                os.fsync(f.fileno())
            return "a 16 MB write passed an 8 MB file system"
        except OSError:
            return None  # ENOSPC: the cap held
        finally:
            subprocess.run(["umount", folder], capture_output=True, timeout=TIMEOUT_S)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    why = check()
    print("disk caps: each Docker sandbox's writable layer is a file system of its own, the cap its size"
          if why is None else f"disk caps: no file system per sandbox here ({why}): the disk watchdog holds them")
