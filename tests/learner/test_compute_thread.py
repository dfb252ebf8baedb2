"""The learner thread: one thread for all torch work, errors raised where awaited, and a run
stopped mid-step exits at once instead of waiting for the step."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from learner.compute_thread import on_learner_thread
from tests.cli import REPO


def test_results_and_errors_come_back_to_the_caller():
    assert asyncio.run(on_learner_thread(lambda a, b=0: a + b, 2, b=3)) == 5
    with pytest.raises(ZeroDivisionError):
        asyncio.run(on_learner_thread(lambda: 1 / 0))


def test_a_cancelled_long_step_does_not_hold_the_process():
    script = textwrap.dedent("""
        import asyncio, time
        from learner.compute_thread import on_learner_thread

        async def main():
            task = asyncio.ensure_future(on_learner_thread(time.sleep, 120))  # a step that runs on
            await asyncio.sleep(0.5)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                print("cancelled", flush=True)

        asyncio.run(main())
    """)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "cancelled"
    assert time.monotonic() - t0 < 30  # not the step's 120 s
