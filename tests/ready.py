"""Start a Python snippet of this repo in a child process and wait for its READY line."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

from tests.cli import REPO


def start_ready(code: str, *args: str, within: float = 120.0, **popen: object) -> tuple[subprocess.Popen, list[str]]:
    """Run `python -c code args...` from the repo root; returns the process and the words after
    READY on the line that starts with it (earlier lines are skipped). A child that is not
    ready within `within` seconds is killed."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, **popen)
    timer = threading.Timer(within, proc.kill)  # a child that never gets ready must not hang the test
    timer.start()
    try:
        line = "-"
        while line and not line.startswith("READY"):
            line = proc.stdout.readline()
    finally:
        timer.cancel()
    assert line.startswith("READY"), f"child did not start: {line!r}"
    return proc, line.split()[1:]
