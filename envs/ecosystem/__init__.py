"""Adapters for env libraries users already have (optional extras: requirements-extras.txt)."""
from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS_HINT = ".venv/bin/pip install -r requirements-extras.txt"


def require(module: str, package: str) -> ModuleType:
    """Import an optional library, or fail with one line that says how to install it (the
    factory turns this ImportError into its 'cannot load' line, without a traceback)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"the optional package {package} is not installed ({e}); install the extras: {EXTRAS_HINT}") from None
