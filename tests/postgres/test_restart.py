"""PostgreSQL restarted under an open rail: callers see ``TrackerUnavailable``, retry with the
same idempotency keys, and nothing is lost or applied twice (a private server, restarted by pid
on the same port and data)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import pytest

from tests.contract.support import make_pipeline, new_task
from tests.postgres.server import PgServer, require_postgres
from tracker_client.errors import TrackerUnavailable
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

T = TypeVar("T")


async def _retry(call: Callable[[], Awaitable[T]], seen: list[str]) -> T:
    """What the worker's retry layer does: the same call (same key) until the rail answers."""
    with anyio.fail_after(60):
        while True:
            try:
                return await call()
            except TrackerUnavailable as exc:
                seen.append(exc.code or "")
                await anyio.sleep(0.1)


async def test_a_restart_loses_nothing_and_applies_nothing_twice() -> None:
    server = PgServer.create(require_postgres())
    try:
        server.start()
        tracker = await open_tracker(f"{server.url}?schema=restarted&pool_size=2")
        try:
            pid = await make_pipeline(tracker)
            first = await tracker.create_task(new_task(pid, "first"), idempotency_key="c1")
            lease = await tracker.claim("agent", "coder", 600_000, idempotency_key="claim-1")
            assert lease is not None and lease.task.id == first

            server.restart()
            seen: list[str] = []
            second = await _retry(
                lambda: tracker.create_task(new_task(pid, "second"), idempotency_key="c2"), seen
            )
            # A call meeting a pooled connection the restart killed is TrackerUnavailable.
            assert set(seen) <= {"unavailable"}
            # The lease survived the restart: the worker goes on with it.
            assert await _retry(lambda: tracker.heartbeat(lease), seen) > 0
            done = await _retry(
                lambda: tracker.transition(lease, "complete", idempotency_key="t1"), seen
            )
            again = await tracker.transition(lease, "complete", idempotency_key="t1")
            assert again == done  # a retry whose answer was lost replays, not re-applies
            assert (
                await tracker.create_task(new_task(pid, "second"), idempotency_key="c2") == second
            )
            tasks = (await tracker.list_tasks()).items
            assert sorted(t.title for t in tasks) == ["first", "second"]
            runs = await tracker.list_runs(first)
            assert [(r.attempt, r.status) for r in runs] == [(1, "completed")]
        finally:
            await tracker.aclose()
    finally:
        server.destroy()
