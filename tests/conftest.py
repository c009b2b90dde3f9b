"""Fixtures shared by every test package."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio (the worker's production loop)."""
    return "asyncio"
