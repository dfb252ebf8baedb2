"""The repository root, and the experiments CLIs run as a user runs them (a subprocess in the root)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cli(module: str, args: tuple[str, ...], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args, "progress=false"], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m experiments.run ARGS progress=false`."""
    return _cli("experiments.run", args, timeout)


def eval_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m experiments.eval ARGS progress=false`."""
    return _cli("experiments.eval", args, timeout)


def sigterm(proc: subprocess.Popen, timeout: float) -> tuple[tuple[str, str], float]:
    """SIGTERM `proc` as a service manager would: its remaining (stdout, stderr) and the seconds
    it took to exit (killed if it is still there after `timeout`)."""
    t0 = time.monotonic()
    try:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out, time.monotonic() - t0
