"""Which Docker engine a new sandbox goes to: where its image already is, then the least loaded.

Among the engines that answer (engine.live_hosts: a dead one is skipped with a warning), those
that already have the image come first, the least loaded of them wins. An engine's load is its
openclaw containers per CPU of the engine: this process's, counted exactly from the moment one
is placed, plus the running ones of other live processes, counted on the engine every
OTHERS_TTL_S (a dead run's leftovers are no load). With `max_per_host` set, an engine holding
that many is passed over while another one is below it. When no engine that has the image can
take it, the least loaded engine gets the image copied from one that has it
(images.copy_image) and takes the sandbox.

A single configured engine skips all of this: the sandbox goes there (no extra API calls).
"""
from __future__ import annotations

import collections
import logging
import threading
import time

import docker

from envs.sandbox import engine, images, sweeper
from envs.sandbox.engine import client
from envs.sandbox.protocol import SandboxError

log = logging.getLogger(__name__)

OTHERS_TTL_S = 2.0

max_per_host: int | None = None  # containers an engine takes before others are preferred (None: no cap)
_lock = threading.Lock()
_mine: collections.Counter[str] = collections.Counter()  # engine -> this process's containers there
_others: dict[str, tuple[float, int]] = {}  # engine -> (when counted, other processes' containers)
_ncpu: dict[str, int] = {}
_has: set[tuple[str, str]] = set()  # (engine, image) seen present
_copying: dict[tuple[str, str], threading.Lock] = collections.defaultdict(threading.Lock)


def configure(cap: int | None) -> None:
    """Set `max_per_host` (None or 0: no cap)."""
    global max_per_host
    if cap is not None and int(cap) < 0:
        raise ValueError(f"max_per_host must be >= 0, got {cap}")
    max_per_host = int(cap) if cap else None


def has_image(url: str, image: str) -> bool:
    if (url, image) in _has:
        return True
    try:
        client(url).api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return False
    except (docker.errors.DockerException, OSError):
        return False  # the engine failed meanwhile: not a candidate for affinity
    _has.add((url, image))
    return True


def hosts_with(image: str) -> list[str]:
    """The engines that answer and have `image`, in configured order."""
    return [u for u in engine.live_hosts() if has_image(u, image)]


def _count_others(url: str) -> int:
    when, n = _others.get(url, (float("-inf"), 0))
    if time.monotonic() - when > OTHERS_TTL_S:
        mine, now = sweeper.run_id(), time.time()
        try:
            # Load is what runs: a dead run's leftovers (exited, or waiting for a sweep) are not.
            n = sum(1 for c in sweeper.containers(url=url)
                    if c["Labels"].get(sweeper.L_RUN) != mine and c.get("State") in ("created", "running")
                    and not sweeper.owner_gone(c["Labels"], now))
        except (docker.errors.DockerException, OSError):
            pass  # keep the last count; the health check decides whether the engine is used
        _others[url] = (time.monotonic(), n)
    return n


def _cpus(url: str) -> int:
    if url not in _ncpu:
        try:
            _ncpu[url] = max(1, int(client(url).info().get("NCPU") or 1))
        except (docker.errors.DockerException, OSError):
            return 1
    return _ncpu[url]


def load(url: str) -> int:
    """Openclaw containers on engine `url`: this process's (exact) plus others' (recent count)."""
    return _mine[url] + _count_others(url)


def choose(image: str) -> str:
    """Reserve a place for one sandbox of `image` on an engine and return the engine (release
    it with `release` when the container is gone or was never made)."""
    hs = engine.hosts()
    if len(hs) == 1:
        with _lock:
            _mine[hs[0]] += 1
        return hs[0]
    live = engine.live_hosts()
    if not live:
        raise SandboxError(f"no Docker engine answers among {', '.join(engine.name(h) for h in hs)}")
    holders = [u for u in live if has_image(u, image)]
    with _lock:
        loads = {u: load(u) for u in live}

        def key(u: str) -> tuple[float, int, int]:
            return loads[u] / _cpus(u), loads[u], live.index(u)

        def room(us: list[str]) -> list[str]:
            return [u for u in us if max_per_host is None or loads[u] < max_per_host]

        pick = min(room(holders) or room(live) or live, key=key)
        _mine[pick] += 1
    log.debug("sandbox of %s -> %s (live %s, with the image %s, loads %s)", image, engine.name(pick),
              live, holders, loads)
    return pick


def release(url: str) -> None:
    with _lock:
        if _mine[url] > 0:
            _mine[url] -= 1


def ensure_image(image: str, url: str) -> None:
    """Make `image` present on engine `url`, copied from an engine that has it."""
    if has_image(url, image):
        return
    with _copying[(url, image)]:  # concurrent placements of one image copy it once
        if has_image(url, image):
            return
        sources = [u for u in hosts_with(image) if u != url]
        if not sources:
            raise SandboxError(f"image {image} is on no Docker engine that answers "
                               "(build it with `python -m envs.sandbox.images build`; nothing is pulled)")
        try:
            images.copy_image(image, sources[0], url)
        except images.ImageError as e:
            raise SandboxError(str(e)) from e
        _has.add((url, image))


def place(image: str) -> str:
    """Choose an engine for a sandbox of `image` and make sure the image is there."""
    url = choose(image)
    if len(engine.hosts()) > 1:
        try:
            ensure_image(image, url)
        except BaseException:
            release(url)
            raise
    return url
