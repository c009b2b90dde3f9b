"""Fixtures of the shared rules' tests: a real embedded rail on a fresh SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tracker_client.embedded import EmbeddedTracker


@pytest.fixture
async def rail(tmp_path: Path) -> AsyncIterator[EmbeddedTracker]:
    """An embedded rail on ``tmp_path/rail.db``, closed after the test."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        yield tracker
    finally:
        await tracker.aclose()
