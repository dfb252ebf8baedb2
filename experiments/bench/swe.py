"""SWE env throughput: graded episodes per minute with the scripted oracle (edit the fix in,
submit, grade in a fresh sandbox with swebench) at 1 and 32 concurrent episodes, and how many
images were built (one per bundled instance on one shared pytest layer, however many episodes).

The images are removed first (unless --keep-images) so the build count is this run's; builds
are timed apart from the episodes. Each concurrency level runs `--rounds` episodes per env, the
envs cycling over the bundled instances. Figures: `epm_1`, `epm_32` (graded episodes/minute),
`speedup_32` (epm_32 / epm_1, same run), `resolved_rate`, `image_builds`, `repositories`,
`images_used`, `containers_left` (ours, after the envs and pools closed).
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import time
from concurrent.futures import ThreadPoolExecutor


def _remove_images() -> int:
    import docker

    from envs.sandbox import sweeper
    from envs.sandbox.engine import client

    sweeper.sweep()  # containers of dead runs would keep their images
    n = 0
    for img in client().images.list(name="openclaw/swe-*"):
        for tag in img.tags:
            with contextlib.suppress(docker.errors.APIError):
                client().images.remove(tag)
                n += 1
    return n


def run_oracle_episodes(n_envs: int, rounds: int, ids: list[str]) -> tuple[float, int, list[str], set[str]]:
    """(seconds, episodes, unresolved, images) for n_envs envs each running `rounds` oracle
    episodes; `unresolved` says for each episode not resolved which task and what its last step said."""
    from envs.swe.env import SWEEnv

    # warm containers per image: the episodes spread over the instances' images
    envs = [SWEEnv(pool_size=max(1, -(-n_envs // len(set(ids))))) for _ in range(n_envs)]

    def run(i: int) -> tuple[list[str], set[str]]:
        env, unresolved, images = envs[i], [], set()
        for r in range(rounds):
            task_id = ids[(i + r * n_envs) % len(ids)]
            obs, _ = env.reset(options={"task_id": task_id})
            images.add(env.image)
            for action in env.task.oracle:
                obs, reward, term, trunc, info = env.step(action)
                if term or trunc:
                    break
            if not (term and reward == 1.0):
                unresolved.append(f"{task_id}: {info.get('status')}: {str(obs)[-300:]}")
        return unresolved, images

    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(n_envs) as ex:
            results = list(ex.map(run, range(n_envs)))
    finally:
        for e in envs:
            e.close()
    seconds = time.monotonic() - t0
    return seconds, n_envs * rounds, [u for us, _ in results for u in us], set().union(*(im for _, im in results))


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench swe")
    ap.add_argument("--envs", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--rounds", type=int, nargs="+", default=[4, 1], help="episodes per env, per --envs entry")
    ap.add_argument("--keep-images", action="store_true", help="do not remove the SWE images first")
    args = ap.parse_args(argv)
    if len(args.rounds) != len(args.envs):
        ap.error("give one --rounds value per --envs value")
    from envs.swe import bundled

    out: dict = {"removed_images": 0 if args.keep_images else _remove_images()}
    by_repo: dict[str, list[str]] = {}
    for r in bundled.instances():
        by_repo.setdefault(r["repo"], []).append(r["instance_id"])
    # one instance of each repository in turn, so even a few episodes use every repository
    ids = [iid for group in itertools.zip_longest(*by_repo.values()) for iid in group if iid]
    t0 = time.monotonic()
    for name in bundled.repo_names():
        bundled.repo_images(name)
    out["build_s"] = round(time.monotonic() - t0, 1)
    images: set[str] = set()
    episodes = resolved = 0
    for n, rounds in zip(args.envs, args.rounds):
        seconds, eps, unresolved, used = run_oracle_episodes(n, rounds, ids)
        out[f"epm_{n}"] = round(eps / seconds * 60, 2)
        out[f"episodes_{n}"] = eps
        episodes, resolved, images = episodes + eps, resolved + eps - len(unresolved), images | used
    if len(args.envs) > 1:
        out[f"speedup_{args.envs[-1]}"] = round(out[f"epm_{args.envs[-1]}"] / out[f"epm_{args.envs[0]}"], 2)
    out["resolved_rate"] = round(resolved / max(episodes, 1), 3)
    out["image_builds"] = len(bundled.builds)
    out["repositories"] = len(bundled.repo_names())
    out["images_used"] = len(images)
    out["containers_left"] = containers_left()
    return out


def containers_left(wait_s: float = 60.0) -> int:
    """This process's containers still there once its pools are shut down (removal is in the
    background: wait up to `wait_s` for it)."""
    from envs.sandbox import pool, sweeper
    from envs.sandbox.engine import client

    pool.shutdown_all()
    deadline = time.monotonic() + wait_s
    while True:
        left = len(client().api.containers(all=True, filters={"label": f"{sweeper.L_RUN}={sweeper.run_id()}"}))
        if left == 0 or time.monotonic() > deadline:
            return left
        time.sleep(1.0)
