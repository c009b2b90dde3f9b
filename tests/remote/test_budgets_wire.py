"""A task's budgets over the wire (docs/operate/budgets.md): a served rail that does not list the
``budgets`` extension (an older release) would drop them silently, so the client refuses to
send them there, naming the field; nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.contract.support import make_pipeline, new_task
from tests.remote.fixtures import TEST_RETRY
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import Unsupported
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class WithoutBudgets(httpx.AsyncBaseTransport):
    """The served tracker, its ``/health`` listing every extension but ``budgets``."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path != "/health":
            return response
        doc = json.loads(await response.aread())
        doc["extensions"] = [e for e in doc["extensions"] if e != "budgets"]
        return httpx.Response(200, json=doc)


async def test_an_older_served_rail_is_not_sent_budgets_it_would_drop(tmp_path: Path) -> None:
    embedded = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    transport = WithoutBudgets(httpx.ASGITransport(app=create_app(embedded)))
    remote = RemoteTracker("http://127.0.0.1:7700", retry=TEST_RETRY, transport=transport)
    try:
        pid = await make_pipeline(remote)
        with pytest.raises(Unsupported, match="budgets"):
            await remote.create_task(new_task(pid, budgets={"max_loops": 2}))
        assert (await embedded.list_tasks(pipeline_id=pid)).items == []
        assert await remote.create_task(new_task(pid))  # without budgets: as before
    finally:
        await remote.aclose()
        await embedded.aclose()
