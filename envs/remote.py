"""Envs in Ray actors (`cluster=ray`): one env per actor, driven through a proxy.

`RemoteEnv` keeps the calls the runner, the actors and the evaluator make on an `AgentEnv`
(reset, step, close, task_ids, oracle_action, random_action, system_prompt, tools, and any
other public method of the env) and forwards each to the env in its actor, so the rollout
code does not change. The env's own exceptions come back as themselves (Ray re-raises them as a
subclass of the original); an actor that died or stopped answering raises `EnvWorkerLost`,
which the runner records as status infra_error and replaces the env.

`connect()` joins a Ray cluster (`address`: "auto", "ray://head:10001") or starts a local one in
this process. Actors are owned by this driver: `RemoteEnv.close()` kills its actor, and Ray
kills the rest when the driver exits, Ctrl-C included.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any, Callable

import ray
from ray.exceptions import GetTimeoutError, RayError, RayTaskError

from envs.sandbox import release_all

log = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0  # an actor's process start and the env's constructor
CLOSE_TIMEOUT_S = 30.0
# Ray gives a local node a fixed 30 s to register with its GCS; on a loaded machine (a parallel
# test suite on two cores) that can pass, so a local start is tried this many times
LOCAL_START_TRIES = 3


class EnvWorkerLost(RuntimeError):
    """The env's actor died or did not answer in time: an infrastructure failure."""


class EnvWorker:
    """The actor: holds one env and runs the proxy's calls on it."""

    def __init__(self, make_env: Callable[[], Any]) -> None:
        self.env = make_env()
        self._busy = threading.Lock()  # held during an env call; shutdown must not close under one

    def describe(self) -> dict[str, Any]:
        env = self.env
        methods = sorted(n for n in dir(env) if not n.startswith("_") and callable(getattr(env, n, None)))
        return {"fail_outcome": env.fail_outcome, "max_turns": env.max_turns, "methods": methods,
                "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        with self._busy:
            if method == "random_action":  # the caller's generator must advance as a local call would
                rng = args[0]
                return self.env.random_action(rng), rng.bit_generator.state
            return getattr(self.env, method)(*args, **kwargs)

    def shutdown(self) -> None:
        """Close the env (unless a call is stuck in it) and remove this process's sandboxes."""
        if self._busy.acquire(timeout=1.0):
            try:
                self.env.close()
            finally:
                self._busy.release()
        release_all()  # Docker sandboxes: the warm pools' too


_Worker = ray.remote(EnvWorker)


class RemoteEnv:
    """An env in a Ray actor, behind the AgentEnv interface (see the module docstring)."""

    def __init__(self, make_env: Callable[[], Any], actor_cpus: float = 0.25, scheduling: str = "SPREAD",
                 call_timeout_s: float = 1800.0) -> None:
        self.call_timeout_s = float(call_timeout_s)
        self._closed = False
        self.actor = _Worker.options(
            num_cpus=actor_cpus, scheduling_strategy=scheduling,
            max_concurrency=2,  # shutdown can run while a call hangs
        ).remote(make_env)
        try:
            info = self._get(self.actor.describe.remote(), START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        self.fail_outcome: float = info["fail_outcome"]
        self.max_turns: int = info["max_turns"]
        self.pid: int = info["pid"]
        self.node: str = info["node"]
        self._methods: frozenset[str] = frozenset(info["methods"])

    def _get(self, ref: Any, timeout: float) -> Any:
        try:
            return ray.get(ref, timeout=timeout)
        except RayTaskError:
            raise  # the env's own exception (an instance of its original class too)
        except GetTimeoutError:
            raise EnvWorkerLost(f"the env actor did not answer within {timeout:g} s") from None
        except RayError as e:
            raise EnvWorkerLost(f"the env actor died: {type(e).__name__}: {str(e)[:500]}") from None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise EnvWorkerLost("the env actor was closed")
        return self._get(self.actor.call.remote(method, args, kwargs), self.call_timeout_s)

    # ---- what the runner and the actors call -----------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        return self._call("reset", seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        return self._call("step", action)

    def task_ids(self) -> list[str]:
        return self._call("task_ids")

    def oracle_action(self) -> str:
        return self._call("oracle_action")

    def random_action(self, rng: Any) -> str:
        action, state = self._call("random_action", rng)
        rng.bit_generator.state = state
        return action

    def __getattr__(self, name: str) -> Any:
        # Only the env's own public methods (supports_heldout & co. test with getattr).
        if name.startswith("_") or name not in self.__dict__.get("_methods", ()):
            raise AttributeError(name)
        return functools.partial(self._call, name)

    def close(self) -> None:
        """Close the env in its actor, then kill the actor. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            ray.get(self.actor.shutdown.remote(), timeout=CLOSE_TIMEOUT_S)
        except Exception as e:  # dead or stuck: killing it is all that is left
            log.debug("env actor shutdown: %s", e)
        ray.kill(self.actor)


def connect(address: str | None = None, num_cpus: int | None = None, object_store_mb: int = 256,
            runtime_env: dict[str, Any] | None = None) -> Callable[[], None]:
    """Join the Ray cluster at `address` or (None) start a local one with `num_cpus`; returns
    what undoes it (a no-op when Ray was already initialised by someone else)."""
    if ray.is_initialized():
        return lambda: None
    kw: dict[str, Any] = {"include_dashboard": False, "runtime_env": runtime_env or None}
    if address:
        kw["address"] = address
        ray.init(**kw)
        return ray.shutdown
    kw.update(num_cpus=num_cpus, object_store_memory=object_store_mb << 20)
    for attempt in range(1, LOCAL_START_TRIES):
        try:
            ray.init(**kw)
            return ray.shutdown
        except Exception as e:  # Ray raises a bare Exception for this
            if "timed out during startup" not in str(e):
                raise
            log.warning("the local Ray node did not register within Ray's 30 s (a loaded machine?); "
                        "starting it again (try %d of %d)", attempt + 1, LOCAL_START_TRIES)
            ray.shutdown()
    ray.init(**kw)  # the last try: its error is the caller's
    return ray.shutdown


def remote_factory(make_env: Callable[[], Any], actor_cpus: float = 0.25, scheduling: str = "SPREAD",
                   call_timeout_s: float = 1800.0) -> Callable[[], RemoteEnv]:
    """A zero-argument constructor of envs in Ray actors (Ray must be connected)."""
    return functools.partial(RemoteEnv, make_env, actor_cpus, scheduling, call_timeout_s)
