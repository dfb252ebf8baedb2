"""The one Docker client of a process, and whether an engine answers at all."""
from __future__ import annotations

import functools

import docker

# Enough HTTP connections that 128 sandboxes' API calls never queue on the client side.
MAX_POOL_SIZE = 512


@functools.lru_cache(maxsize=1)
def client() -> docker.DockerClient:
    """The process-wide Docker client (thread-safe; reads DOCKER_HOST like the CLI)."""
    return docker.DockerClient.from_env(version="auto", timeout=120, max_pool_size=MAX_POOL_SIZE)


def engine_available() -> bool:
    """True when a Docker engine answers a ping (never raises)."""
    try:
        return bool(client().ping())
    except Exception:
        client.cache_clear()  # the next call tries afresh (the engine may start later)
        return False
