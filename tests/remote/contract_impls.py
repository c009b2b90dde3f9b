"""The remote implementations of the contract suite (picked up by ``tests/contract/conftest.py``).

* ``remote-asgi``: RemoteTracker -> served tracker in process, through ``httpx.ASGITransport``;
* ``remote-tcp``: RemoteTracker -> uvicorn on a real 127.0.0.1 ephemeral port.

Both serve an EmbeddedTracker that keeps the test's fake clock and options, so every capability
holds. (Against a plain NullTickets server the client would trim oversized event data with a
marker instead of refusing it; the served tracker advertises a 16 MiB request limit, so the
embedded tracker's own 1 MiB limit answers first.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.contract.support import ALL_CAPABILITIES, FakeClock, TrackerImpl
from tests.remote.fixtures import served_asgi, served_tcp
from tracker_client.protocol import Tracker

REMOTE_CAPABILITIES = ALL_CAPABILITIES


@asynccontextmanager
async def _asgi(path: Path, clock: FakeClock, options: Mapping[str, Any]) -> AsyncIterator[Tracker]:
    async with served_asgi(path, clock, options) as remote:
        yield remote


@asynccontextmanager
async def _tcp(path: Path, clock: FakeClock, options: Mapping[str, Any]) -> AsyncIterator[Tracker]:
    async with served_tcp(path, clock, options) as remote:
        yield remote


IMPLEMENTATIONS = [
    TrackerImpl(name="remote-asgi", open=_asgi, capabilities=REMOTE_CAPABILITIES),
    TrackerImpl(name="remote-tcp", open=_tcp, capabilities=REMOTE_CAPABILITIES),
]
