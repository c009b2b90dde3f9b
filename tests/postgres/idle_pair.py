"""Two instances of one PostgreSQL rail for the idle parked-claim and wake-up tests: the idle
instance whose parked claims (or waiters) are watched, and a writer standing for another host;
and the real conditions those tests wait on instead of sleeping."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from tests.postgres.server import fresh_schema_url
from tracker_client.factory import open_tracker
from tracker_client.postgres.tracker import PostgresTracker

__all__ = ["idle_pair", "settle", "waiters_asleep"]


@asynccontextmanager
async def idle_pair(
    key: str, **idle_options: Any
) -> AsyncIterator[tuple[PostgresTracker, PostgresTracker]]:
    """Two instances on the schema of ``key``: the idle one (its URL with ``idle_options``,
    e.g. ``poll_interval_s``) and a writer; both closed at the end."""
    idle = await open_tracker(fresh_schema_url(key, **idle_options))
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


async def waiters_asleep(tracker: PostgresTracker, n: int = 1, within_s: float = 10.0) -> None:
    """Until ``n`` waiters of ``tracker`` (``wait``, ``wait_for_work``) are asleep on its
    in-process wake-up event, the one another instance's NOTIFY sets: past their look at the
    rail, so only a wake-up (or their tick) ends them. Polled under a deadline: a real
    condition, not a guess at how long a waiter takes to fall asleep."""
    try:
        with anyio.fail_after(within_s):
            while tracker._changes.changed.statistics().tasks_waiting < n:
                await anyio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(
            f"not {n} waiter(s) asleep within {within_s} s: one ended before it was seen"
            " asleep (a late NOTIFY of an earlier write woke it?) or never got past its look"
        ) from None
