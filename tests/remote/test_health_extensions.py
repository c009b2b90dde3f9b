"""``GET /health`` lists the extensions of the tracker actually served, not the whole table.

A served PostgreSQL rail that lacks an extension must not advertise it: a client would call an
operation the rail can't answer. The served embedded rail has every one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from tracker_client.capabilities import Capabilities
from tracker_client.contract.table import EXTENSIONS
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class _Partial(EmbeddedTracker):
    """An embedded rail declaring two extensions fewer (as a rail still being built does)."""

    async def capabilities(self) -> Capabilities:
        caps = await super().capabilities()
        return replace(caps, extensions=caps.extensions - {"spans", "workers"})


async def _health(tracker: EmbeddedTracker) -> list[str]:
    transport = httpx.ASGITransport(app=create_app(tracker))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        answer = await http.get("/health")
    assert answer.status_code == 200
    extensions = answer.json()["extensions"]
    assert isinstance(extensions, list)
    return extensions


async def test_the_served_embedded_rail_lists_every_extension(tmp_path: Path) -> None:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        assert await _health(tracker) == list(EXTENSIONS)
        assert (await tracker.capabilities()).extensions == frozenset(EXTENSIONS)
    finally:
        await tracker.aclose()


async def test_a_rail_without_an_extension_is_not_served_as_having_it(tmp_path: Path) -> None:
    tracker = await _Partial.open(str(tmp_path / "rail.db"))
    try:
        listed = await _health(tracker)
    finally:
        await tracker.aclose()
    assert "spans" not in listed and "workers" not in listed
    assert listed == [name for name in EXTENSIONS if name not in {"spans", "workers"}]
