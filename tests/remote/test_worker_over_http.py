"""The daemon's own tests (``tests/worker/test_daemon.py``), unchanged, against the remote client.

The ``tracker`` fixture is overridden with a :class:`RemoteTracker` talking to a served embedded
tracker, in process (``httpx.ASGITransport``) and on a real 127.0.0.1 port: a worker configured
with ``tracker.url = "http://..."`` must behave exactly as it does on the embedded rail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.remote.fixtures import served_asgi, served_tcp
from tests.worker.conftest import pipeline_id  # noqa: F401  (fixture used by the tests below)
from tests.worker.test_daemon import *  # noqa: F403  (the tests themselves, unchanged)
from tracker_client.protocol import Tracker


@pytest.fixture(params=["asgi", "tcp"])
async def tracker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Tracker]:
    """A RemoteTracker -> served EmbeddedTracker instead of the embedded tracker itself."""
    serve = served_asgi if request.param == "asgi" else served_tcp
    async with serve(tmp_path / "rail.db") as remote:
        yield remote
