"""Where agent code runs. `open_sandbox(backend, ...)` picks a backend by its config word.

Each backend's entry module (bwrap.py; pool.py for docker) exposes `open_sandbox(image, limits,
**opts) -> Sandbox` and is imported only when asked for, so a host without Docker can still use
bubblewrap and the reverse.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from envs.sandbox.protocol import ExecResult, Limits, Sandbox, SandboxError, SandboxLimitError

BACKENDS: dict[str, str] = {"bwrap": "envs.sandbox.bwrap", "docker": "envs.sandbox.pool"}


def open_sandbox(backend: str, image: str | None = None, limits: Limits = Limits(), **opts: Any) -> Sandbox:
    """Open a sandbox on `backend` ("bwrap" or "docker"); `opts` go to the backend."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; choose one of: {', '.join(sorted(BACKENDS))}")
    module = importlib.import_module(BACKENDS[backend])
    return module.open_sandbox(image, limits, **opts)


_releasers: list[Callable[[], object]] = []


def on_release(release: Callable[[], object]) -> None:
    """A backend's way to end what this process holds (Docker: its pools and containers); kept
    once however often given."""
    if release not in _releasers:
        _releasers.append(release)


def release_all() -> None:
    """End the sandboxes this process still holds, on each backend that asked (`on_release`): a
    Ray worker's shutdown. Imports no backend: one this process never used is not touched."""
    for release in list(_releasers):
        release()


__all__ = ["BACKENDS", "ExecResult", "Limits", "Sandbox", "SandboxError", "SandboxLimitError", "on_release",
           "open_sandbox", "release_all"]
