"""The remote client declares what the server at the other end can do, as typed capabilities.

A plain NullTickets server (the fake, which advertises nothing) is :data:`NULLTICKETS`; a served
rail is everything the embedded tracker can do, except that answers can be lost on the wire
and requests have the served tracker's own size limit.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from tests.remote.fake_nulltickets import FakeNullTickets
from tests.remote.fixtures import served_asgi
from tracker_client.capabilities import EMBEDDED, NULLTICKETS, NULLTICKETS_LEASE_TTL_MS
from tracker_client.contract.table import EXTENSIONS
from tracker_client.nulltickets.client import RemoteTracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_a_plain_server_is_nulltickets() -> None:
    fake = FakeNullTickets()
    tracker = RemoteTracker("http://127.0.0.1:7700", transport=fake.transport())
    try:
        assert tracker.max_lease_ttl_ms == NULLTICKETS_LEASE_TTL_MS  # safe before any request
        assert await tracker.capabilities() == NULLTICKETS
        assert await tracker.capabilities() == NULLTICKETS
        assert [r.url.path for r in fake.requests] == ["/health"]  # read once
    finally:
        await tracker.aclose()


async def test_a_served_rail_declares_the_embedded_trackers_powers(tmp_path: Path) -> None:
    async with served_asgi(tmp_path / "rail.db") as remote:
        caps = await remote.capabilities()
        assert caps.extensions == frozenset(EXTENSIONS)
        assert caps.max_request_bytes is not None and caps.max_request_bytes > 65_536
        assert caps == replace(
            EMBEDDED,
            answers_can_be_lost=True,
            max_request_bytes=caps.max_request_bytes,
            extensions=caps.extensions,
        )
        assert remote.max_lease_ttl_ms is None


async def test_a_partial_server_declares_only_what_it_lists() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"status": "ok", "version": "x", "extensions": ["release", "wait"]}
        )

    tracker = RemoteTracker("http://127.0.0.1:7700", transport=httpx.MockTransport(handler))
    try:
        caps = await tracker.capabilities()
    finally:
        await tracker.aclose()
    assert caps.release and not caps.wait and not caps.backlog_ops
    assert caps.max_lease_ttl_ms == NULLTICKETS_LEASE_TTL_MS and not caps.strict_limits
