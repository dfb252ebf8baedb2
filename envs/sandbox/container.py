"""Containers on a Docker engine: create one (limits, labels, the idle pid 1) and remove them.

The ground floor of the Docker backend: it knows engines (engine.py) and the disk caps
(layerfs.py, diskwatch.py), nothing of shells, pools or placement, so every module above may
import it. `Limits.disk_mb` binds, in this order of preference, as the engine's storage quota
(overlay2 on xfs with pquota), as the size of a file system of the container's own holding its
writable layer (layerfs.py: the engine on this host, root), or as diskwatch.py's watchdog (a
poll: writers can pass the cap before it stops them). `disk_cap()` says which an engine uses.
A creation carries a label of its own (`L_SLOT`): a create the client gave up on (a timeout)
may still have made the container on the engine, and the label finds it to remove it.
"""
from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from typing import Any

import docker
import requests

from envs.sandbox import diskwatch, layerfs
from envs.sandbox.engine import client, primary
from envs.sandbox.protocol import Limits, SandboxError

# pid 1: no handler (nothing inside can signal it), SIGCHLD ignored (the kernel reaps its orphans)
HOLDER = ["bash", "-c", "trap '' CHLD; exec sleep infinity"]
API_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)
L_SLOT = "openclaw.slot"  # a label unique to one creation: finds a container whose create timed out
REMOVE_THREADS = 16
QUOTA, LAYERFS = "quota", "layerfs"  # the kernel's caps: the engine's storage quota, a file system per container
_disk_how: dict[str, str] = {}  # engine -> QUOTA, LAYERFS, or why only the watchdog caps its disk
log = logging.getLogger(__name__)


def disk_cap(url: str | None = None) -> str | None:
    """How `Limits.disk_mb` binds on engine `url` (None: the primary): QUOTA or LAYERFS (the
    kernel enforces it), else why the watchdog holds it; None before the engine's first container."""
    return _disk_how.get(primary() if url is None else url)


def _without_quota() -> str:
    return LAYERFS if (why := layerfs.unavailable()) is None else why


def create_container(
    image: str,
    limits: Limits,
    labels: dict[str, str],
    cap_drop: tuple[str, ...] = ("ALL",),
    url: str | None = None,
    cap_add: tuple[str, ...] = (),
) -> str:
    """Create and start a container whose pid 1 idles (`HOLDER`) on engine `url` (None: the
    primary); returns its id."""
    url = primary() if url is None else url
    api = client(url).api
    labels = {**labels, L_SLOT: secrets.token_hex(8)}  # names this creation alone
    if url not in _disk_how:  # only overlay2 on xfs (mounted with pquota) can cap a container's disk itself
        try:
            xfs = "'xfs'" in str(client(url).info().get("DriverStatus", "")).lower()
        except API_ERRORS as e:
            raise SandboxError(f"docker info failed: {e}") from e
        _disk_how[url] = QUOTA if xfs else _without_quota()
    for quota in ([True, False] if _disk_how[url] == QUOTA else [False]):
        host = api.create_host_config(
            storage_opt={"size": f"{limits.disk_mb}m"} if quota else None,
            network_mode="bridge" if limits.network else "none",  # the host's one default network
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",  # no swap beyond the memory limit
            pids_limit=limits.pids,
            nano_cpus=int(limits.cpus * 1e9),
            cap_drop=list(cap_drop),
            # Only root processes can use these (the holder, the verifier's execs): the sandbox
            # user's processes run with no capabilities, and no-new-privileges keeps it so.
            cap_add=list(cap_add),
            security_opt=["no-new-privileges"],
            # no quota: no file grows past the cap (the kernel's RLIMIT_FSIZE); layerfs or the watchdog sums them
            ulimits=None if quota else [docker.types.Ulimit(name="fsize", soft=limits.disk_mb << 20, hard=limits.disk_mb << 20)],
        )
        try:
            cid = api.create_container(
                # The holder runs as root so that root's execs get the container's capabilities
                # (Docker gives none to any process of a container whose user is not root); the
                # shell and every exec run as the sandbox's user. The image's ENTRYPOINT is bypassed.
                image, entrypoint=HOLDER, command=[], user="0", labels=labels, host_config=host,
                network_disabled=not limits.network,
            )["Id"]
            break
        except docker.errors.ImageNotFound as e:
            raise SandboxError(f"image {image} not found: build it with `python -m envs.sandbox.images build`") from e
        except docker.errors.APIError as e:
            if quota and "storage" in str(e).lower():
                _disk_how[url] = _without_quota()  # xfs without pquota: the engine cannot cap it
                continue
            raise SandboxError(f"docker create failed: {e}") from e
        except API_ERRORS as e:
            # The engine may have made it after the client gave up waiting: the slot label finds it.
            remove_many([c["Id"] for c in _by_label(api, L_SLOT, labels[L_SLOT])], url)
            raise SandboxError(f"docker create failed: {e}") from e
    try:
        upper = "" if quota else (api.inspect_container(cid).get("GraphDriver", {}).get("Data") or {}).get("UpperDir", "")
        capped = quota or (_disk_how[url] == LAYERFS and _cap_layer(url, upper, limits.disk_mb))
        api.start(cid)
        if not capped:
            diskwatch.watch(cid, upper, limits.disk_mb, lambda: api.kill(cid))
    except API_ERRORS as e:
        remove_many([cid], url)
        raise SandboxError(f"docker start failed: {e}") from e
    return cid


def _cap_layer(url: str, upper: str, disk_mb: int) -> bool:
    """Give the container's writable layer (overlay2's `diff`, in its layer folder) a file system
    of `disk_mb` (layerfs.py); False, and the engine's later containers left to the watchdog,
    where that cannot be done (another host's engine, another storage driver, a failed mount)."""
    layer = os.path.dirname(upper)
    try:
        if os.path.basename(upper) != "diff" or not os.path.isdir(layer):
            raise OSError(f"its layers are not overlay2 folders on this host ({upper or 'no UpperDir'})")
        layerfs.cap(layer, disk_mb)
        return True
    except OSError as e:
        _disk_how[url] = f"no file system per sandbox: {e}"
        log.warning("disk caps on %s fall back to the watchdog (%s)", url, _disk_how[url])
        return False


def _by_label(api: Any, key: str, value: str) -> list[dict[str, Any]]:
    try:
        return api.containers(all=True, filters={"label": f"{key}={value}"})
    except API_ERRORS:
        return []  # still labelled with this run: the pool shutdown or the exit cleanup removes it


def remove_container(cid: str, url: str | None = None) -> None:
    """Force-remove a container of engine `url` (None: the primary; gone already is fine)."""
    try:
        client(url).api.remove_container(cid, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:
        if "already in progress" not in str(e):
            raise



def remove_many(ids: list[str], url: str | None = None, timeout_s: float = 120.0) -> int:
    """Force-remove containers of engine `url` (None: the primary), several at a time; returns
    how many went. Plain threads, not an executor: this also runs from atexit, after executors
    refuse new work."""
    done: list[str] = []

    def work(chunk: list[str]) -> None:
        for cid in chunk:
            try:
                remove_container(cid, url)
                done.append(cid)
            except API_ERRORS:
                pass  # still labelled: the next sweep removes it

    k = min(REMOVE_THREADS, len(ids))
    threads = [threading.Thread(target=work, args=(ids[i::k],), daemon=True) for i in range(k)]
    try:
        for t in threads:
            t.start()
    except RuntimeError:  # no new threads at this point of interpreter shutdown
        work([c for c in ids if c not in done])
    end = time.monotonic() + timeout_s
    for t in threads:
        if t.ident is not None:
            t.join(max(0.0, end - time.monotonic()))
    return len(done)
