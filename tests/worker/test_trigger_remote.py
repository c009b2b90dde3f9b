"""The per-pipeline trigger tests (``test_trigger_pipelines.py``), unchanged, over HTTP.

The ``tracker`` fixture is a :class:`RemoteTracker` talking HTTP to a served embedded rail with an
api token (in process through ``httpx.ASGITransport``): the worker reads pipeline definitions
through ``GET /pipelines/{id}`` there, as it would from a NullTickets server. (Not on a real port:
uvicorn's shutdown then waits out the long poll a drained worker abandons, ~25 s per test.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.worker.test_trigger_pipelines as pipeline_tests
from tests.remote.fixtures import served_asgi
from tests.worker.test_trigger_pipelines import *  # noqa: F403  (the tests themselves)
from tracker_client.protocol import Tracker

pytestmark = pipeline_tests.pytestmark

TOKEN = "t" * 32


@pytest.fixture
async def tracker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Tracker]:
    """A RemoteTracker -> served EmbeddedTracker (the worker's config gets the same token)."""
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", TOKEN)
    async with served_asgi(tmp_path / "rail.db", server_token=TOKEN, api_token=TOKEN) as remote:
        yield remote
