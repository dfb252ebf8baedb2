"""Warm pools of ready Docker sandboxes, one per (image, limits, user, workdir, verifier).

`open_sandbox` here is the docker backend's entry point (envs.sandbox.BACKENDS).

A pool keeps `size` sandboxes ready (container started, shell open) plus one more for each
caller waiting, filled by a few background threads. Creation is paced per engine by a
token bucket and a bound on creations in flight, because dockerd, not the client, is the
bottleneck (about 7.5 creates/s on the reference machine; past that, calls only queue and time
out). `acquire` pops a ready sandbox (milliseconds) after a socket check that needs no API
call; a sandbox is never reused: `close()` hands its container to a background remover and the
fillers replace it, so no episode sees another's files or processes.

With several engines (fleet.py sets them), each new container of a pool is placed by
placement.py (image affinity, then least load), so one pool's sandboxes spread over the hosts.
The first pool of a process sweeps what dead runs left and installs the exit cleanup, which
envs.sandbox.release_all (a Ray worker's shutdown) runs too.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from envs.sandbox import engine, images, on_release, placement, sweeper
from envs.sandbox.container import API_ERRORS, create_container, remove_container, remove_many
from envs.sandbox.docker import DEFAULT_USER, ROOT_CAPS, VERIFIER_CAPS, DockerSandbox
from envs.sandbox.engine import client
from envs.sandbox.protocol import Limits, SandboxError

CREATE_RATE = float(os.environ.get("OPENCLAW_DOCKER_CREATE_RATE", "10"))  # containers/s per engine
CREATE_CONCURRENCY = int(os.environ.get("OPENCLAW_DOCKER_CREATE_CONCURRENCY", "4"))
FILLERS_PER_POOL = 4
FAILS_BEFORE_GIVING_UP = 3  # consecutive failed creations before waiters are told why


class _RateLimiter:
    """Token bucket + in-flight bound for container creation on one engine (shared by every pool)."""

    def __init__(self, rate: float, concurrency: int):
        self.rate = rate
        self.slots = threading.BoundedSemaphore(concurrency)
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def __enter__(self) -> None:
        self.slots.acquire()
        with self._lock:
            now = time.monotonic()
            at = max(now, self._next)
            self._next = at + 1.0 / self.rate
        time.sleep(max(0.0, at - now))

    def __exit__(self, *exc: Any) -> None:
        self.slots.release()


_limiters: dict[str, _RateLimiter] = {}
_limiters_lock = threading.Lock()


def _limiter(url: str) -> _RateLimiter:
    with _limiters_lock:
        if url not in _limiters:
            _limiters[url] = _RateLimiter(CREATE_RATE, CREATE_CONCURRENCY)
        return _limiters[url]


_remover = ThreadPoolExecutor(4, thread_name_prefix="sandbox-remove")


def _new_remover() -> None:  # a forked child inherits the executor but not its threads
    global _remover
    _remover = ThreadPoolExecutor(4, thread_name_prefix="sandbox-remove")


os.register_at_fork(after_in_child=_new_remover)
_pools: dict[tuple, WarmPool] = {}
_pools_lock = threading.RLock()  # re-entered by the exit cleanup in a signal handler
_swept_for_pid = 0


class WarmPool:
    def __init__(self, image: str, limits: Limits, size: int = 4, user: str | None = DEFAULT_USER,
                 deadline_s: float = sweeper.DEFAULT_DEADLINE_S, fillers: int = FILLERS_PER_POOL,
                 workdir: str | None = None, verifier: bool = False):
        self.image, self.limits, self.size = image, limits, max(0, size)
        self.deadline_s = deadline_s
        live = engine.live_hosts()
        if not live:
            raise SandboxError(f"no Docker engine answers ({', '.join(map(engine.name, engine.hosts()))})")
        try:
            where = [u for u in live if placement.has_image(u, image)] if len(live) > 1 else live
            cfg = client((where or live)[0]).api.inspect_image(image)["Config"]
        except API_ERRORS as e:
            raise SandboxError(f"image {image} not found (python -m envs.sandbox.images build): {e}") from e
        image_workdir = cfg.get("WorkingDir") or "/"
        self.user = user if user is not None else (cfg.get("User") or "root")  # None: the image's USER
        root = self.user.partition(":")[0] in ("root", "0")
        self.caps = (ROOT_CAPS if root else VERIFIER_CAPS) if verifier else ()
        if workdir is not None and not workdir.startswith("/"):
            raise ValueError(f"workdir must be an absolute path, got {workdir!r}")
        self.workdir = workdir or image_workdir
        self._make_workdir = self.workdir != image_workdir
        self._ready: collections.deque[DockerSandbox] = collections.deque()
        self._cond = threading.Condition()  # RLock inside: a signal handler may re-enter it
        self._waiting = 0
        self._inflight = 0
        self._leased: set[DockerSandbox] = set()
        self._fails = 0
        self._last_error: Exception | None = None
        self._closed = False
        self.created = 0
        self._threads = [threading.Thread(target=self._fill, name=f"sandbox-fill-{i}", daemon=True)
                         for i in range(fillers)]
        for t in self._threads:
            t.start()

    # ---- filling -----------------------------------------------------------------------------
    def _want(self) -> bool:
        return len(self._ready) + self._inflight < self.size + self._waiting

    def _fill(self) -> None:
        backoff = 0.5
        while True:
            with self._cond:
                while not self._closed and not self._want():
                    self._cond.wait(1.0)
                if self._closed:
                    return
                self._inflight += 1
            sb = None
            try:
                sb = self._create()
            except Exception as e:  # reported to waiters; the filler goes on after a pause
                err: Exception | None = e
            else:
                err = None
            with self._cond:
                self._inflight -= 1
                late = sb is not None and self._closed
                if sb is not None and not late:
                    self._ready.append(sb)
                    self._fails, backoff = 0, 0.5
                elif sb is None:
                    self._fails += 1
                    self._last_error = err
                self._cond.notify_all()
            if late:  # created after shutdown began: removed here, inside the time shutdown waits for us
                _quiet_remove(sb.id, sb.engine)
                return
            if err is not None:
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    def _create(self) -> DockerSandbox:
        url = placement.place(self.image)  # counted there from now on: released when removed
        try:
            with _limiter(url):
                if self._closed:
                    raise SandboxError("pool closed")
                cid = create_container(self.image, self.limits, sweeper.labels(self.deadline_s), url=url, cap_add=self.caps)
        except BaseException:
            placement.release(url)
            raise
        sb = DockerSandbox(cid, self.user, self.workdir, on_close=self._release, make_workdir=self._make_workdir, url=url,
                           sibling=self.acquire)
        try:
            sb.start_shell()
            if sb._uid == 0 and self.caps == VERIFIER_CAPS:  # a user name that is uid 0 would hold DAC_READ_SEARCH
                raise SandboxError(f"user {self.user!r} of {self.image} is uid 0: name it root")
        except SandboxError:
            _remove_later(cid, url)
            raise
        self.created += 1
        return sb

    # ---- leasing -----------------------------------------------------------------------------
    def acquire(self, timeout: float = 300.0) -> DockerSandbox:
        """A ready sandbox: immediate when the pool is warm, else the next one created."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._waiting += 1
            self._cond.notify_all()
            try:
                while True:
                    if self._closed:
                        raise SandboxError("the sandbox pool is shut down (the process is exiting)")
                    while self._ready:
                        sb = self._ready.popleft()
                        if sb.idle_ok():
                            self._leased.add(sb)
                            self._cond.notify_all()  # a filler replaces it
                            return sb
                        _remove_later(sb.id, sb.engine)  # died while idle
                    if self._fails >= FAILS_BEFORE_GIVING_UP and not self._inflight:
                        raise SandboxError(f"cannot create sandboxes of {self.image}: {self._last_error}")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SandboxError(
                            f"no sandbox of {self.image} within {timeout:.0f} s "
                            f"({self._inflight} being created, {len(self._leased)} in use)")
                    self._cond.wait(min(left, 1.0))
            finally:
                self._waiting -= 1

    def _release(self, sb: DockerSandbox) -> None:
        with self._cond:
            if sb not in self._leased:
                return  # shutdown removed it already
            self._leased.discard(sb)
        _remove_later(sb.id, sb.engine)

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {"ready": len(self._ready), "in_use": len(self._leased), "creating": self._inflight,
                    "created": self.created, "size": self.size}

    def resize(self, size: int) -> None:
        with self._cond:
            self.size = max(0, size)
            self._cond.notify_all()

    def shutdown(self, wait_s: float = 15.0) -> None:
        """Stop filling, wait for creations in flight, remove ready and leased containers."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            doomed = [*self._ready, *self._leased]
            self._ready.clear()
            self._leased.clear()
        end = time.monotonic() + wait_s
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(0.0, end - time.monotonic()))
        by_engine: dict[str, list[str]] = collections.defaultdict(list)
        for sb in doomed:
            by_engine[sb.engine].append(sb.id)
        for url, ids in by_engine.items():
            remove_many(ids, url)
            for _ in ids:
                placement.release(url)


def _remove_later(cid: str, url: str) -> None:
    """Remove a container off the caller's path (inline once the interpreter is shutting down)."""
    try:
        _remover.submit(_quiet_remove, cid, url)
    except RuntimeError:
        _quiet_remove(cid, url)


def _quiet_remove(cid: str, url: str) -> None:
    try:
        remove_container(cid, url)
    except API_ERRORS:
        pass  # still labelled with this run: the exit cleanup or the next sweep removes it
    finally:
        placement.release(url)


def get_pool(image: str, limits: Limits, pool_size: int = 4, user: str | None = DEFAULT_USER,
             deadline_s: float = sweeper.DEFAULT_DEADLINE_S, workdir: str | None = None,
             verifier: bool = False) -> WarmPool:
    """The process's pool for (image, limits, user, workdir, verifier), created (and the host
    swept) on first use; a larger `pool_size` than the pool has grows it. `user` None: the
    image's USER (root when it names none)."""
    global _swept_for_pid
    key = (image, limits, user, workdir, verifier)
    with _pools_lock:
        if _swept_for_pid != os.getpid():
            _pools.clear()  # a forked child does not own its parent's pools
            try:
                sweeper.sweep()
            except API_ERRORS as e:
                raise SandboxError(f"Docker engine error: {e}") from e
            _swept_for_pid = os.getpid()
            sweeper.on_shutdown(shutdown_all)
            on_release(sweeper.remove_all_mine)  # a Ray worker's shutdown (envs/remote.py) ends them too
        sweeper.install_exit_cleanup()  # again from the main thread if first called elsewhere
        pool = _pools.get(key)
        if pool is None or pool._closed:
            pool = _pools[key] = WarmPool(image, limits, pool_size, user, deadline_s, workdir=workdir, verifier=verifier)
        elif pool_size > pool.size:
            pool.resize(pool_size)
        return pool


def wait_warm(timeout_s: float) -> bool:
    """Wait until every pool of this process has a ready sandbox (a benchmark timing a warm
    acquire); False if one had none by the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        with _pools_lock:
            pools = list(_pools.values())
        if all(p.stats()["ready"] > 0 for p in pools if not p._closed):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def shutdown_all() -> None:
    with _pools_lock:
        pools = list(_pools.values())
    for p in pools:
        p.shutdown()


def open_sandbox(image: str | None = None, limits: Limits = Limits(), **opts: Any) -> DockerSandbox:
    """A sandbox from the warm pool of (image, limits). `image` None is the default `sandbox`
    image (built first if its recipe changed). opts: pool_size (warm target, default 4: set it to
    the number of episodes run at once), user (default `agent`; None: the image's USER, root when it
    names none), workdir (where the shell starts and relative paths resolve; default the image's
    WORKDIR; created for the user if missing), deadline_s (how long a container may live before any
    sweeper removes it), verifier (root gets VERIFIER_CAPS, or ROOT_CAPS for a root agent, which
    `verify` needs; default False), acquire_timeout (s)."""
    if image is None:
        try:
            image = images.ensure_image("sandbox")
        except images.ImageError as e:
            raise SandboxError(str(e)) from e
    acquire_timeout = float(opts.pop("acquire_timeout", 300.0))
    return get_pool(image, limits, **opts).acquire(timeout=acquire_timeout)
