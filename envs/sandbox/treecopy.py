"""Copy a sandbox's files into another's from the host, for `fork()`: one walk in this process.

Every name is opened relative to its parent's file descriptor with O_NOFOLLOW, so a symlink the
agent planted (or swapped in while we copy) is copied as a link and never followed out of the
sandbox. Owners are written as they are created, through `uids` (a bwrap fork has its own uid),
so no chown walk follows. Files are copied by the kernel (copy_file_range, else sendfile) on a
few threads, a folder's files at once (those calls and the metadata ones release the GIL). Modes, owners, timestamps, hard links, symlinks, fifos and device
nodes are kept; sockets are skipped; extended attributes are not copied.

With `upper=True` the source is an overlayfs upper dir (a Docker container's changes): a
whiteout (a 0/0 character device) deletes that name in the destination, and an opaque folder
replaces the destination's folder instead of merging into it. Such a source must come from a
mount that neither redirects renamed folders nor copies metadata alone (`overlay_plain`), else
the upper dir does not hold every changed file whole.
"""
from __future__ import annotations

import concurrent.futures
import errno
import os
import shutil
import stat
from typing import Callable, TypeVar

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPAQUE = ("trusted.overlay.opaque", "user.overlay.opaque")
_CHUNK = 1 << 30
# A folder's files go to the threads in batches (a task per file costs more than a small file's
# copy): a batch closes at this many files or once its files hold this many bytes.
_BATCH_FILES, _BATCH_BYTES = 64, 1 << 20
T = TypeVar("T")
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="treecopy")


def overlay_plain(mount_options: str) -> bool:
    """Whether an overlay mount with these options keeps every change whole in its upper dir:
    no metacopy (data left below) and no redirect_dir (a renamed folder's contents left below)."""
    opts = dict(o.partition("=")[::2] for o in mount_options.split(","))

    def on(feature: str, default_on: str) -> bool:
        if feature in opts:
            return opts[feature] not in ("off", "follow", "nofollow")
        try:
            with open(f"/sys/module/overlay/parameters/{feature}") as f:
                return f.read().strip() == default_on
        except OSError:
            return True  # unknown kernel default: assume the worst

    return not on("metacopy", "Y") and not on("redirect_dir", "Y")


def copy_tree(src: str, dst: str, uids: dict[int, int] | None = None, upper: bool = False) -> None:
    """Make the tree under `dst` hold what the tree under `src` holds (names in `dst` that `src`
    lacks stay, unless `upper` marks them deleted). The two roots' own attributes are left as
    they are. `uids` maps owners (uid and gid alike) of `src` to those `dst` gets."""
    sfd, dfd = os.open(src, _DIR), None
    try:
        dfd = os.open(dst, _DIR)
        _Copier(dfd, uids or {}, upper).dir(sfd, dfd, "")
    finally:
        for fd in (sfd, dfd):
            if fd is not None:
                os.close(fd)


class _Copier:
    def __init__(self, root: int, uids: dict[int, int], upper: bool):
        self.root = root  # the destination root's fd: hard links name their first copy from it
        self.uids = uids
        self.upper = upper
        self.links: dict[tuple[int, int], str] = {}  # (dev, ino) of a source file -> its first copy's path
        self.same_fs = True  # copy_file_range works between the two trees (until it says otherwise)

    def dir(self, sfd: int, dfd: int, rel: str) -> None:
        pending, batch, size = [], [], 0
        with os.scandir(sfd) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                    batch.append((entry.name, st))
                    size += st.st_size
                    if len(batch) == _BATCH_FILES or size >= _BATCH_BYTES:
                        pending.append(_POOL.submit(self.files, sfd, dfd, batch))
                        batch, size = [], 0
                else:
                    self.entry(sfd, dfd, entry.name, st, rel)
        if batch:
            pending.append(_POOL.submit(self.files, sfd, dfd, batch))
        concurrent.futures.wait(pending)  # all of them: the caller closes the fds they use
        for f in pending:
            f.result()

    def files(self, sfd: int, dfd: int, batch: list[tuple[str, os.stat_result]]) -> None:
        for name, st in batch:
            self.file(sfd, dfd, name, st)

    def entry(self, sfd: int, dfd: int, name: str, st: os.stat_result, rel: str) -> None:
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            self.folder(sfd, dfd, name, st, rel + name + "/")
            return
        if stat.S_ISSOCK(mode) or (self.upper and stat.S_ISCHR(mode) and st.st_rdev == 0):
            _remove(dfd, name)  # a socket is not copied; a whiteout says the name was deleted
            return
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in self.links:
            _replacing(dfd, name, lambda: os.link(self.links[key], name, src_dir_fd=self.root, dst_dir_fd=dfd,
                                                  follow_symlinks=False))
            return
        if stat.S_ISREG(mode):
            self.file(sfd, dfd, name, st)
        else:
            if stat.S_ISLNK(mode):
                target = os.readlink(name, dir_fd=sfd)
                _replacing(dfd, name, lambda: os.symlink(target, name, dir_fd=dfd))
            elif stat.S_ISFIFO(mode):
                _replacing(dfd, name, lambda: os.mkfifo(name, 0o600, dir_fd=dfd))
            else:  # a character or block device
                _replacing(dfd, name, lambda: os.mknod(name, stat.S_IFMT(mode) | 0o600, st.st_rdev, dir_fd=dfd))
            self.attrs(dfd, name, st)
        if st.st_nlink > 1:
            self.links[key] = rel + name

    def folder(self, sfd: int, dfd: int, name: str, st: os.stat_result, rel: str) -> None:
        child = os.open(name, _DIR, dir_fd=sfd)
        out = None
        try:
            there = _lstat(dfd, name)
            if there is not None and (not stat.S_ISDIR(there.st_mode) or (self.upper and _opaque(child))):
                _remove(dfd, name)
                there = None
            if there is None:
                os.mkdir(name, 0o700, dir_fd=dfd)
            out = os.open(name, _DIR, dir_fd=dfd)
            self.dir(child, out, rel)
            self.attrs(out, None, st)  # last: filling the folder changed its times
        finally:
            for fd in (child, out):
                if fd is not None:
                    os.close(fd)

    def file(self, sfd: int, dfd: int, name: str, st: os.stat_result) -> None:
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=sfd)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = _replacing(dfd, name, lambda: os.open(name, flags, 0o600, dir_fd=dfd))
            try:
                self.data(src, out, st.st_size)
                self.attrs(out, None, st)
            finally:
                os.close(out)
        finally:
            os.close(src)

    def data(self, src: int, out: int, size: int) -> None:
        """Copy `size` bytes in the kernel: copy_file_range (a reflink where the file system can)
        until it fails across these two file systems once, then sendfile."""
        done = 0
        while done < size:
            if self.same_fs:
                try:
                    n = os.copy_file_range(src, out, min(_CHUNK, size - done))
                except OSError as e:
                    if e.errno not in (errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP):
                        raise
                    self.same_fs = False
                    continue
            else:
                n = os.sendfile(out, src, done, min(_CHUNK, size - done))
            if n == 0:
                return  # the file shrank while we copied
            done += n

    def attrs(self, dfd: int, name: str | None, st: os.stat_result) -> None:
        """Owner, then mode (a chown clears set-id bits), then times: of the open fd `dfd`, or of
        `name` in it (not followed)."""
        uid, gid = self.uids.get(st.st_uid, st.st_uid), self.uids.get(st.st_gid, st.st_gid)
        times = (st.st_atime_ns, st.st_mtime_ns)
        if name is None:
            os.fchown(dfd, uid, gid)
            os.fchmod(dfd, stat.S_IMODE(st.st_mode))
            os.utime(dfd, ns=times)
            return
        os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISLNK(st.st_mode):  # a symlink's mode cannot be set (and means nothing)
            os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=dfd)
        os.utime(name, ns=times, dir_fd=dfd, follow_symlinks=False)


def _replacing(dfd: int, name: str, create: Callable[[], T]) -> T:
    """create(), after deleting what already has `name` in `dfd` if it had to."""
    try:
        return create()
    except FileExistsError:
        _remove(dfd, name)
        return create()


def _lstat(dfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _remove(dfd: int, name: str) -> None:
    """Delete `name` in `dfd` if it is there (a folder with everything under it)."""
    st = _lstat(dfd, name)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dfd)
    else:
        os.unlink(name, dir_fd=dfd)


def _opaque(fd: int) -> bool:
    for attr in _OPAQUE:
        try:
            if os.getxattr(fd, attr) == b"y":
                return True
        except OSError:
            pass
    return False
