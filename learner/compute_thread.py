"""The one thread the learners' torch work runs on: train steps, log-probs, checkpoints, loading.

glibc gives each thread that allocates its own malloc arena, and an arena keeps for that thread
what a step freed; a train step's activations are GBs. Run on asyncio's default pool, steps land
on whichever worker is free, and each worker came to hold a step's worth of freed memory
(SmolLM2-135M SFT, 8 toolcall demonstrations a step: 18 GB resident after 6 steps spread over the
pool's workers, 6.9 GB with every step on one thread). On one thread the next step reuses what
the last one freed.

The thread is a daemon: a run stopped by Ctrl-C or SIGTERM exits at once, instead of waiting
(as a ThreadPoolExecutor's worker makes the interpreter wait at exit) for a step that can take
minutes on a loaded machine; the awaiting task is cancelled, and the step's result is dropped.
A step still inside torch's C++ code when the interpreter tears down aborts the process
("terminate called without an active exception", exit 134): a program that stops while a call
may be under way leaves through `exit_now` once it has stopped everything else.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import queue
import sys
import threading
from typing import Any, Callable, NoReturn, TypeVar

T = TypeVar("T")

_work: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future]] = queue.SimpleQueue()
_lock = threading.Lock()
_thread: threading.Thread | None = None
_busy = threading.Event()  # a call is running


def _serve() -> None:
    while True:
        fn, fut = _work.get()
        if fut.set_running_or_notify_cancel():  # else cancelled while it waited
            _busy.set()
            try:
                fut.set_result(fn())
            except BaseException as e:  # the caller's error, raised where it awaits
                fut.set_exception(e)
            finally:
                _busy.clear()
        # while this thread waits for the next call, the last one must not keep its arguments
        # alive: a warm start's SFT learner (weights and AdamW state, GBs) stayed through RL
        del fn, fut


def _submit(fn: Callable[[], T]) -> concurrent.futures.Future:
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_serve, name="learner", daemon=True)
            _thread.start()
    fut: concurrent.futures.Future = concurrent.futures.Future()
    _work.put((fn, fut))
    return fut


def exit_now(message: str) -> NoReturn:
    """`sys.exit(message)` (exit 1), or, while a call is still running here, the same without the
    interpreter's teardown (which would abort under it): call it once all else is stopped."""
    if not _busy.is_set():
        sys.exit(message)
    print(message, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


async def on_learner_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on the learner thread, awaited from the event loop."""
    return await asyncio.wrap_future(_submit(functools.partial(fn, *args, **kwargs)))
