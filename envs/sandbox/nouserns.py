"""`python -m envs.sandbox.nouserns CMD ARGS...`: exec CMD under a seccomp filter that refuses new
user namespaces (bwrap's --disable-userns needs --unshare-user, which the bwrap backend does not
use: it keeps the host's uids).

On x86_64, unshare(2) and clone(2) with CLONE_NEWUSER fail with EPERM, and clone3(2) fails with
ENOSYS (its flags sit in a struct seccomp cannot read), so libc falls back to clone(2). The
filter is inherited by every process the command starts. Elsewhere the command runs unfiltered.
"""
from __future__ import annotations

import ctypes
import os
import platform
import signal
import struct
import sys

_LD, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JSET|K, RET|K
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_AUDIT_ARCH_X86_64 = 0xC000003E
_NR_CLONE, _NR_UNSHARE, _NR_CLONE3 = 56, 272, 435
_CLONE_NEWUSER = 0x10000000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


PROGRAM = b"".join([
    _insn(_LD, 0, 0, 4),                        # 0: arch
    _insn(_JEQ, 0, 8, _AUDIT_ARCH_X86_64),      # 1: other arch -> 10 allow
    _insn(_LD, 0, 0, 0),                        # 2: syscall number
    _insn(_JEQ, 5, 0, _NR_CLONE3),              # 3: -> 9 ENOSYS
    _insn(_JEQ, 1, 0, _NR_UNSHARE),             # 4: -> 6
    _insn(_JEQ, 0, 4, _NR_CLONE),               # 5: else -> 10 allow
    _insn(_LD, 0, 0, 16),                       # 6: args[0], low 32 bits (flags)
    _insn(_JSET, 0, 2, _CLONE_NEWUSER),         # 7: no NEWUSER -> 10 allow
    _insn(_RET, 0, 0, _ERRNO | _EPERM),         # 8
    _insn(_RET, 0, 0, _ERRNO | _ENOSYS),        # 9
    _insn(_RET, 0, 0, _ALLOW),                  # 10
])


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


if __name__ == "__main__":
    install()
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them, and exec would pass that on
        signal.signal(sig, signal.SIG_DFL)
    os.execvp(sys.argv[1], sys.argv[1:])
