"""agent/host_memory.py: freed large blocks go back to the OS once map_large_blocks is set."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

# A fresh interpreter: free a 16 MB block (glibc then serves blocks up to 16 MB from its heap),
# allocate forty 8 MB tensors, free all but the last, and print how much RSS stayed.
PROBE = """
import sys, torch
from agent import host_memory
if sys.argv[1] == "mapped":
    assert host_memory.map_large_blocks()
big = torch.ones(4 << 20)
del big
before = host_memory.rss_bytes()
blocks = [torch.ones(2 << 20) for _ in range(40)]
last = blocks.pop()
del blocks
print((host_memory.rss_bytes() - before) / 2**20)
"""


def retained_mb(how: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE, how], capture_output=True, text=True, timeout=120, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_tensors_leave_the_process_once_large_blocks_are_mapped():
    assert retained_mb("default") > 200  # 39 freed 8 MB blocks stay in the heap: the fragmentation fixed
    assert retained_mb("mapped") < 40  # only the live one


def test_a_users_malloc_setting_wins(monkeypatch):
    from agent import host_memory

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert host_memory.map_large_blocks() is False
