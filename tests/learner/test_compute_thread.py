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


def test_a_run_stopped_mid_torch_step_exits_with_its_own_last_line():
    """Interrupted while the learner thread is inside a torch op, a run leaves through exit_now:
    exit 1 with its own last line, not a C++ abort (exit 134) of the interpreter's teardown."""
    script = textwrap.dedent("""
        import asyncio, torch
        from learner.compute_thread import exit_now, on_learner_thread

        def step():
            a = torch.randn(1500, 1500)
            for _ in range(100000):
                a = torch.tanh(a @ a)

        async def main():
            asyncio.ensure_future(on_learner_thread(step))
            await asyncio.sleep(2)
            raise KeyboardInterrupt

        try:
            asyncio.run(main())
        except KeyboardInterrupt:
            exit_now("interrupted: everything this run started was stopped")
    """)
    p = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1] == "interrupted: everything this run started was stopped"
