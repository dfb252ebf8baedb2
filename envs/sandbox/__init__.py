"""Where agent code runs. `open_sandbox(backend, ...)` picks a backend by its config word.

Each backend's entry module (bwrap.py; pool.py for docker) exposes `open_sandbox(image, limits,
**opts) -> Sandbox` and is imported only when asked for, so a host without Docker can still use
bubblewrap and the reverse.
"""
from __future__ import annotations

import importlib
from typing import Any

from envs.sandbox.protocol import ExecResult, Limits, Sandbox, SandboxError, SandboxLimitError

BACKENDS: dict[str, str] = {"bwrap": "envs.sandbox.bwrap", "docker": "envs.sandbox.pool"}


def open_sandbox(backend: str, image: str | None = None, limits: Limits = Limits(), **opts: Any) -> Sandbox:
    """Open a sandbox on `backend` ("bwrap" or "docker"); `opts` go to the backend."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; choose one of: {', '.join(sorted(BACKENDS))}")
    module = importlib.import_module(BACKENDS[backend])
    return module.open_sandbox(image, limits, **opts)


__all__ = ["BACKENDS", "ExecResult", "Limits", "Sandbox", "SandboxError", "SandboxLimitError", "open_sandbox"]
