"""`python -m envs.sandbox.seccomp CMD ARGS...`: exec CMD under the sandboxes' seccomp filter.

Both backends start the agent's shell and the verifier's processes through it (`prefix`); the
filter is inherited by every process they start and cannot be lifted. Under Docker it stacks on
the engine's own profile (the stricter answer wins), so nothing that profile refuses comes back.
On x86_64 it refuses:
- new user namespaces (bwrap's --disable-userns needs --unshare-user, which the bwrap backend
  does not use: it keeps the host's uids): unshare(2) and clone(2) with CLONE_NEWUSER fail with
  EPERM, and clone3(2) with ENOSYS (its flags sit in a struct seccomp cannot read), so libc falls
  back to clone(2);
- disk reserved without writing it: fallocate(2) fails with EOPNOTSUPP, so tools fall back to
  write(), which RLIMIT_FSIZE bounds per file and the disk watchdog (diskwatch.py) in all.
  fallocate checks RLIMIT_FSIZE only when it grows the size (`fallocate -n` reserves any amount)
  and reserves gigabytes in microseconds; io_uring_setup(2) fails with ENOSYS, since a ring's
  IORING_OP_FALLOCATE would run past any syscall filter;
- the 32-bit ABIs (i386 by `int 0x80`, x32): ENOSYS for every call, since a filter by number
  would have to track each ABI's numbering, and the sandboxes' programs are 64-bit.
Elsewhere the command runs unfiltered.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import signal
import struct
import sys

_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, JMP|JSET|K, RET|K
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS, _EOPNOTSUPP = 1, 38, 95
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_NR_CLONE, _NR_UNSHARE, _NR_FALLOCATE, _NR_IO_URING_SETUP, _NR_CLONE3 = 56, 272, 285, 425, 435
_CLONE_NEWUSER = 0x10000000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2

# (label, code, k, jump if true, jump if false): a jump names a label further down, None is the next line
_LINES = [
    (None, _LD, 4, None, None),                                  # arch
    (None, _JEQ, _AUDIT_ARCH_X86_64, None, "enosys"),
    (None, _LD, 0, None, None),                                  # syscall number
    (None, _JGE, _X32_SYSCALL_BIT, "enosys", None),
    (None, _JEQ, _NR_CLONE3, "enosys", None),
    (None, _JEQ, _NR_IO_URING_SETUP, "enosys", None),
    (None, _JEQ, _NR_FALLOCATE, "eopnotsupp", None),
    (None, _JEQ, _NR_UNSHARE, "flags", None),
    (None, _JEQ, _NR_CLONE, "flags", "allow"),
    ("flags", _LD, 16, None, None),                              # args[0], low 32 bits
    (None, _JSET, _CLONE_NEWUSER, "eperm", "allow"),
    ("eperm", _RET, _ERRNO | _EPERM, None, None),
    ("eopnotsupp", _RET, _ERRNO | _EOPNOTSUPP, None, None),
    ("enosys", _RET, _ERRNO | _ENOSYS, None, None),
    ("allow", _RET, _ALLOW, None, None),
]


def _assemble(lines: list) -> bytes:
    at = {label: i for i, (label, *_) in enumerate(lines) if label}
    return b"".join(struct.pack("HBBI", code, at[jt] - i - 1 if jt else 0, at[jf] - i - 1 if jf else 0, k)
                    for i, (_, code, k, jt, jf) in enumerate(lines))


PROGRAM = _assemble(_LINES)


def install() -> None:
    """Put this process (and what it starts) under the filter."""
    if platform.machine() != "x86_64":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4  # a pointer must not be cut to an int
    buf = ctypes.create_string_buffer(PROGRAM, len(PROGRAM))
    fprog = struct.pack("HxxxxxxQ", len(PROGRAM) // 8, ctypes.addressof(buf))  # struct sock_fprog
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fbuf), 0, 0) != 0:
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
                libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fbuf), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "seccomp filter refused")


@functools.cache
def _source() -> str:
    with open(__file__) as f:
        return f.read()


def prefix(python: str) -> list[str]:
    """argv prefix that runs the rest of argv under the filter with interpreter `python` (this
    module's text goes along, so it also works in a container that lacks this repository)."""
    return [python, "-c", _source()]


if __name__ == "__main__":
    install()
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them, and exec would pass that on
        signal.signal(sig, signal.SIG_DFL)
    os.execvp(sys.argv[1], sys.argv[1:])
