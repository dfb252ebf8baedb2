"""GUI env throughput: env steps per second of GuiEnv against miniwob's own gymnasium env
driven directly, at 1 and 8 browsers, in the same run on the same workload.

Workload per env: episodes of the same MiniWoB task (click-button), each a reset and then
`--steps` clicks on a fixed spot that does not end the episode (so both sides render a new
screenshot and read the page every step). Steps per second count steps only; resets are
inside the timed window on both sides. Figures: `ours_1`, `direct_1`, `ours_8`, `direct_8`
(steps/s) and `ratio_1`, `ratio_8` (ours / direct; the goal is >= 0.8).
"""
from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable

import numpy as np

TASK = "click-button"
SPOT = (80, 200)  # below the buttons and text: a click there changes nothing


def _ours(n: int) -> tuple[list[Callable[[int], None]], Callable[[int], None], Callable[[], None]]:
    from envs.gui.browser import BrowserPool
    from envs.gui.env import GuiEnv

    pool = BrowserPool(max_idle=n)
    envs = [GuiEnv(pool=pool, families=[TASK], max_turns=1000) for _ in range(n)]
    action = f"click_xy({SPOT[0]}, {SPOT[1]})"

    def reset(i: int) -> None:
        envs[i].reset(seed=i)

    def step(i: int) -> None:
        _, _, term, trunc, info = envs[i].step(action)
        assert info["status"] == "ok" and not (term or trunc), info["next_state"].content

    def close() -> None:
        for e in envs:
            e.close()
        pool.close()

    return [reset] * n, step, close


def _direct(n: int) -> tuple[list[Callable[[int], None]], Callable[[int], None], Callable[[], None]]:
    import gymnasium
    import miniwob  # noqa: F401  (registers miniwob/*)

    from envs.gui.browser import configure_env

    configure_env()
    envs = [gymnasium.make(f"miniwob/{TASK}-v1").unwrapped for _ in range(n)]
    actions = [e.create_action("CLICK_COORDS", coords=np.array(SPOT, dtype=np.float32)) for e in envs]
    for e in envs:  # as ours: no 10 s episode timer between steps of a slow policy
        e.instance.driver.execute_script("core.EPISODE_MAX_TIME = 3600000;")

    def reset(i: int) -> None:
        envs[i].reset(seed=i)

    def step(i: int) -> None:
        _, _, term, _, _ = envs[i].step(actions[i])
        assert not term

    def close() -> None:
        for e in envs:
            e.close()

    return [reset] * n, step, close


def _measure(make, n: int, episodes: int, steps: int) -> float:
    resets, step, close = make(n)
    try:
        for i in range(n):  # warm-up: browsers started, page loaded
            resets[i](i)
        counts = [0] * n
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                for _ in range(episodes):
                    resets[i](i)
                    for _ in range(steps):
                        step(i)
                        counts[i] += 1
            except BaseException as e:  # re-raised in the main thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        elapsed = time.perf_counter() - t0
        if errors:
            raise errors[0]
        return sum(counts) / elapsed
    finally:
        close()


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench gui")
    ap.add_argument("--episodes", type=int, default=6, help="episodes per env")
    ap.add_argument("--steps", type=int, default=5, help="steps per episode")
    ap.add_argument("--browsers", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args(argv)
    out: dict = {"task": TASK, "episodes": args.episodes, "steps": args.steps}
    for n in args.browsers:
        # Alternate the two sides so a slow spell of the shared machine hits both.
        ours = _measure(_ours, n, args.episodes, args.steps)
        direct = _measure(_direct, n, args.episodes, args.steps)
        out[f"ours_{n}"] = round(ours, 2)
        out[f"direct_{n}"] = round(direct, 2)
        out[f"ratio_{n}"] = round(ours / direct, 3)
    return out
