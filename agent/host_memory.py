"""The process's memory on the host: what it holds, and giving back what it freed.

A training process allocates and frees hundreds of MB per step (a weight file read, activations,
log-softmax over the vocabulary) from worker threads, each with a glibc malloc arena of its own;
freed chunks stay in those arenas, and RSS grew by about the model's size per update until the
kernel's OOM killer stopped a run (docs/results.md). `trim()` hands the free pages back.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

_PAGE = os.sysconf("SC_PAGE_SIZE")
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None)


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def peak_rss_bytes() -> int:
    """The highest resident set size this process has had (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return rss_bytes()


def trim() -> None:
    """Return freed heap memory of every malloc arena to the OS (glibc's malloc_trim; a no-op elsewhere)."""
    fn = getattr(_LIBC, "malloc_trim", None)
    if fn is not None:
        fn(0)


def usage_gb() -> dict[str, float]:
    """The figures each metrics row carries: RSS now and at its peak, in GB."""
    return {"rss_gb": rss_bytes() / 1e9, "peak_rss_gb": peak_rss_bytes() / 1e9}
