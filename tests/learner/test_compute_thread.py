"""The learner thread: one thread for all torch work, errors raised where awaited, and a run
stopped mid-step exits at once instead of waiting for the step."""
from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
import time
import weakref

import pytest

from learner.compute_thread import on_learner_thread
from tests.cli import REPO


def test_results_and_errors_come_back_to_the_caller():
    assert asyncio.run(on_learner_thread(lambda a, b=0: a + b, 2, b=3)) == 5
    with pytest.raises(ZeroDivisionError):
        asyncio.run(on_learner_thread(lambda: 1 / 0))


def test_a_finished_call_keeps_nothing_of_its_arguments():
    """What the last call was given (a warm start's SFT learner: GBs of weights and optimizer
    state) is freed when the call returns, not when the thread's next call comes."""
    class Learner:
        def save(self) -> str:
            return "saved"

    learner = Learner()
    gone = weakref.ref(learner)
    assert asyncio.run(on_learner_thread(learner.save)) == "saved"
    del learner
    deadline = time.monotonic() + 5
    while gone() is not None and time.monotonic() < deadline:  # the thread drops it just after resolving
        gc.collect()
        time.sleep(0.01)
    assert gone() is None


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
