"""Docker engines: the hosts sandboxes may run on, one client per engine, and which answer.

An engine is named by its URL (`unix:///var/run/docker.sock`, `tcp://host:2376`); the empty
name `LOCAL` is the engine the docker CLI would use (DOCKER_HOST, else the default socket).
TLS for tcp:// engines comes from DOCKER_TLS_VERIFY / DOCKER_CERT_PATH, as for the CLI.
`set_hosts()` (fleet.py's `use`, outside envs/sandbox) sets the engines of this process (default:
the local one); the first that answers is the primary, which builds images (placement.py copies
them where they are needed).
"""
from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
from typing import Sequence

import docker

log = logging.getLogger(__name__)

LOCAL = ""
# Enough HTTP connections that 128 sandboxes' API calls never queue on the client side.
MAX_POOL_SIZE = 512
PING_TIMEOUT_S = 3.0  # a host that does not answer a ping within this is taken as down
HEALTH_TTL_S = 10.0  # how long a ping's answer is trusted

_hosts: list[str] = [LOCAL]
_seen: dict[str, None] = {LOCAL: None}  # every engine this process was given (cleanup covers all)
_health: dict[str, tuple[float, bool]] = {}  # url -> (when checked, answered)
_lock = threading.Lock()


class NoEngine(docker.errors.DockerException):
    """No configured Docker engine answers (a DockerException: callers' engine-error handling covers it)."""


def name(url: str) -> str:
    """The URL an engine is reached at (LOCAL spelled out), for messages."""
    return url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def set_hosts(urls: Sequence[str] | None) -> None:
    """Place sandboxes on these engines (None or empty: the local engine only)."""
    global _hosts
    unique: dict[str, str] = {}  # one entry per engine, however often or however spelled
    for u in [str(u).strip() for u in (urls or [])] or [LOCAL]:
        if u and "://" not in u:
            raise ValueError(f"Docker host {u!r} is not a URL (unix:///path.sock, tcp://host:port)")
        unique.setdefault(name(u), u)
    with _lock:
        _hosts = list(unique.values())
        _seen.update(dict.fromkeys(_hosts))


def hosts() -> list[str]:
    return list(_hosts)


def seen() -> list[str]:
    """Every engine configured in this process so far (the exit cleanup visits each)."""
    return list(_seen)


def _kwargs(url: str) -> dict:
    kw = docker.utils.kwargs_from_env()  # DOCKER_HOST and the TLS settings, as the CLI reads them
    if url:
        kw["base_url"] = url
    return kw


@functools.lru_cache(maxsize=None)
def _client(url: str) -> docker.DockerClient:
    return docker.DockerClient(**_kwargs(url), version="auto", timeout=120, max_pool_size=MAX_POOL_SIZE)


def client(url: str | None = None) -> docker.DockerClient:
    """The process-wide client of engine `url` (None: the primary). Thread-safe. A failed
    connection is not cached: the next call tries afresh."""
    return _client(primary() if url is None else url)


@functools.lru_cache(maxsize=None)
def _pinger(url: str) -> docker.APIClient:
    # A fixed API version: no version handshake, so an unreachable host costs one timeout.
    return docker.APIClient(**_kwargs(url), version="1.24", timeout=PING_TIMEOUT_S)


def answers(url: str, warn: bool = True) -> bool:
    """Whether engine `url` answers a ping now (within PING_TIMEOUT_S; never raises). A change
    of state is logged, with `warn`."""
    ok, err = True, ""
    try:
        _pinger(url).ping()
    except Exception as e:
        ok, err = False, _why(e)
    with _lock:
        was = _health.get(url, (0.0, True))[1]
        _health[url] = (time.monotonic(), ok)
    if warn and was and not ok:
        log.warning("Docker engine %s does not answer (%s): no sandboxes go there", name(url), err)
    elif warn and ok and not was:
        log.warning("Docker engine %s answers again", name(url))
    return ok


def _why(e: Exception) -> str:
    """The gist of a connection error (requests nests it three exceptions deep)."""
    text = str(e)
    m = re.search(r"\[Errno -?\d+\] [^'\")]+|timed out|[Tt]imeout", text)
    return f"{type(e).__name__}: {m.group(0) if m else text[:200]}"


def live_hosts(fresh: bool = False) -> list[str]:
    """The configured engines that answered a ping in the last HEALTH_TTL_S (pinged anew when
    older, or all with `fresh`), in configured order."""
    now = time.monotonic()
    live = []
    for url in hosts():
        checked, ok = _health.get(url, (float("-inf"), False))
        if fresh or now - checked > HEALTH_TTL_S:
            ok = answers(url)
        if ok:
            live.append(url)
    return live


def primary() -> str:
    """The engine that builds images: the only host, or the first configured one that answers."""
    hs = hosts()
    if len(hs) == 1:
        return hs[0]
    live = live_hosts()
    if not live:
        raise NoEngine(f"no Docker engine answers among {', '.join(name(h) for h in hs)}")
    return live[0]


def engine_available() -> bool:
    """True when at least one configured engine answers a ping (never raises)."""
    return bool(live_hosts(fresh=True))
