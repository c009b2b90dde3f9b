"""The PostgreSQL rail as an implementation of the contract suite (``tests/contract``).

Each rail name of a test is a schema of the one shared server (:mod:`.server`): a fresh test gets
a fresh schema (a ``CREATE SCHEMA`` and the migrations, not a new server or database), and two
opens of one name share one rail, as two processes on one host or two hosts would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.contract.support import FakeClock, TrackerImpl
from tests.postgres.server import fresh_schema_url
from tracker_client.factory import open_tracker
from tracker_client.protocol import Tracker


@asynccontextmanager
async def open_postgres(
    path: Path, clock: FakeClock, options: Mapping[str, Any]
) -> AsyncIterator[Tracker]:
    """Open the rail of ``path`` (a schema named after it) with the fake clock."""
    tracker = await open_tracker(fresh_schema_url(str(path)), clock=clock, **dict(options))
    try:
        yield tracker
    finally:
        await tracker.aclose()


POSTGRES = TrackerImpl(name="postgres", open=open_postgres)
