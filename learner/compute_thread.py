"""The one thread the learners' torch work runs on: train steps, log-probs, checkpoints, loading.

glibc gives each thread that allocates its own malloc arena, and an arena keeps for that thread
what a step freed; a train step's activations are GBs. Run on asyncio's default pool, steps land
on whichever worker is free, and each worker came to hold a step's worth of freed memory
(SmolLM2-135M SFT, 8 toolcall demonstrations a step: 18 GB resident after 6 steps spread over the
pool's workers, 6.9 GB with every step on one thread). On one thread the next step reuses what
the last one freed.
"""
from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="learner")


async def on_learner_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on the learner thread, awaited from the event loop."""
    return await asyncio.get_running_loop().run_in_executor(_executor, functools.partial(fn, *args, **kwargs))
