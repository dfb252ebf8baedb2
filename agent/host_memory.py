"""The process's memory on the host: what it holds, and giving back what it freed.

A training process allocates and frees hundreds of MB per step (a weight file read, activations,
log-softmax over the vocabulary) from worker threads, each with a glibc malloc arena of its own;
freed chunks stay in those arenas, and RSS grew by about the model's size per update until the
kernel's OOM killer stopped a run (docs/results.md). `trim()` hands the free pages back.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import threading
import time
from typing import Iterator

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


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def map_large_blocks(threshold_bytes: int = 1 << 20) -> bool:
    """Serve every allocation of at least `threshold_bytes` from a mapping of its own, which goes
    back to the OS when it is freed (`malloc_mmap_threshold_mb=` of a run). By default glibc
    raises that threshold each time a large block is freed (up to 32 MB), so the tensors of the
    next pass come from the heap arenas, where freed blocks stay resident and fragment. Measured
    side by side on SmolLM2-135M (16 samples, one thread each, same load): a train step peaked
    1.42 GB above its steady state by default, 0.95 GB with 1 MB, but took 181 s instead of 134 s
    (each fresh mapping's pages fault in again), hence not the default. A MALLOC_MMAP_THRESHOLD_
    in the environment wins. Returns whether the setting was made (glibc only)."""
    fn = getattr(_LIBC, "mallopt", None)
    if fn is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(fn(_M_MMAP_THRESHOLD, int(threshold_bytes)))


def trim() -> None:
    """Return freed heap memory of every malloc arena to the OS (glibc's malloc_trim; a no-op elsewhere)."""
    fn = getattr(_LIBC, "malloc_trim", None)
    if fn is not None:
        fn(0)


class PhasePeaks:
    """The highest RSS seen while each phase of a run (warm start, rollouts, train, eval) was under
    way, sampled every `period_s` by a daemon thread that runs only while some phase is open.
    Phases may overlap (rollouts of the next step serve on while this one trains): a sample
    counts for every phase open at the time. A spike shorter than the period can be missed;
    `peak_rss_bytes` (the kernel's high-water mark) bounds them all."""

    def __init__(self, period_s: float = 0.1) -> None:
        self.period_s = period_s
        self._open: dict[str, int] = {}  # phase -> how many are under way
        self._peaks: dict[str, int] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        with self._lock:
            self._open[name] = self._open.get(name, 0) + 1
            self._peaks[name] = max(self._peaks.get(name, 0), rss_bytes())
            if self._thread is None:
                self._thread = threading.Thread(target=self._sample, name="memory-phases", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._peaks[name] = max(self._peaks[name], rss_bytes())
                self._open[name] -= 1
                if not self._open[name]:
                    del self._open[name]

    def _sample(self) -> None:
        while True:
            with self._lock:
                if not self._open:
                    self._thread = None
                    return
                now = rss_bytes()
                for name in self._open:
                    self._peaks[name] = max(self._peaks[name], now)
            time.sleep(self.period_s)

    def peaks_gb(self) -> dict[str, float]:
        with self._lock:
            return {name: b / 1e9 for name, b in self._peaks.items()}


PHASE_ORDER = ("warm start", "rollouts", "train", "eval")  # how the run's last line lists them
PHASES = PhasePeaks()  # the process's one tracker: memory is the process's, whoever opens a phase


def usage_gb() -> dict[str, float | dict[str, float]]:
    """The figures each metrics row carries: RSS now and at its peak, and the peak of each phase
    so far (PHASES), in GB."""
    return {"rss_gb": rss_bytes() / 1e9, "peak_rss_gb": peak_rss_bytes() / 1e9, "phase_peak_gb": PHASES.peaks_gb()}


def phase_line() -> str:
    """The run's last line on memory: its peak, then each phase's."""
    peaks = PHASES.peaks_gb()
    order = [p for p in PHASE_ORDER if p in peaks] + sorted(set(peaks) - set(PHASE_ORDER))
    phases = ", ".join(f"{name} {peaks[name]:.2f}" for name in order)
    return f"peak RSS {peak_rss_bytes() / 1e9:.2f} GB" + (f" ({phases} GB by phase)" if phases else "")
