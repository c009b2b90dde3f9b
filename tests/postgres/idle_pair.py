"""Two instances of one PostgreSQL rail for the idle parked-claim tests: the idle instance whose
parked claims are watched, and a writer standing for another host."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tests.postgres.server import fresh_schema_url
from tracker_client.factory import open_tracker
from tracker_client.postgres.tracker import PostgresTracker

__all__ = ["idle_pair", "settle"]


@asynccontextmanager
async def idle_pair(key: str) -> AsyncIterator[tuple[PostgresTracker, PostgresTracker]]:
    """Two instances on the schema of ``key``: the idle one and a writer; both closed at the
    end."""
    idle = await open_tracker(fresh_schema_url(key))
    try:
        writer = await open_tracker(fresh_schema_url(key))
        try:
            assert isinstance(idle, PostgresTracker) and isinstance(writer, PostgresTracker)
            yield idle, writer
        finally:
            await writer.aclose()
    finally:
        await idle.aclose()


async def settle(idle: PostgresTracker) -> None:
    """A first parked claim: the listener is up and this instance's ``waiters`` row is live
    (the first one falls back to claiming: the row was written just now)."""
    await idle.parked_claim("idle", "coder", 60_000, 1, 50, idempotency_key=str(uuid.uuid4()))
