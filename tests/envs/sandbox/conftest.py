"""Fixtures shared by the sandbox tests."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def image() -> str:
    """The sandbox image, built (or found) once per test file."""
    from envs.sandbox.images import ensure_image

    return ensure_image("sandbox")
