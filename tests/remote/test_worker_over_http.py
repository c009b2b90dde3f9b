"""The daemon's own tests (``tests/worker/test_daemon.py``), unchanged, against the remote client.

The ``tracker`` fixture is overridden with a :class:`RemoteTracker` talking to a served embedded
tracker, in process (``httpx.ASGITransport``) and on a real 127.0.0.1 port: a worker configured
with ``tracker.url = "http://..."`` must behave exactly as it does on the embedded rail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import tests.worker.test_daemon as daemon_tests
from tests.remote.fixtures import served_asgi, served_tcp
from tests.worker.conftest import pipeline_id  # noqa: F401  (fixture used by the tests below)
from tests.worker.test_daemon import *  # noqa: F403  (the tests themselves, unchanged)
from tracker_client.protocol import Tracker

#: The daemon module's marks (anyio), and a longer per-test bound: over a real port a test such
#: as ``test_instructions_found_past_a_long_event_history`` (1100 sequential requests) took up to
#: 29 s of the default 60 under CPU load.
_inherited = daemon_tests.pytestmark
pytestmark = [
    *(_inherited if isinstance(_inherited, list) else [_inherited]),
    pytest.mark.timeout(180),
]


@pytest.fixture(params=["asgi", "tcp"])
async def tracker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Tracker]:
    """A RemoteTracker -> served EmbeddedTracker instead of the embedded tracker itself."""
    serve = served_asgi if request.param == "asgi" else served_tcp
    async with serve(tmp_path / "rail.db") as remote:
        yield remote


#: Every tracker call is an HTTP request here (on the real port, a new connection each), several
#: times the cost of an embedded call: 200 tasks took 2-5 s under CPU load instead of 0.5 s and
#: overran the daemon tests' 10 s polling deadline. Those deadlines only bound a failure, so they
#: are scaled for this transport rather than letting a loaded machine turn slowness into one.
DEADLINE_SCALE = 5


@pytest.fixture(autouse=True)
def _http_polling_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon tests' ``wait_until`` with its deadline multiplied by :data:`DEADLINE_SCALE`."""
    inner = daemon_tests.wait_until

    async def wait_until(predicate: Callable[[], Any], timeout: float = 10.0) -> None:
        await inner(predicate, timeout * DEADLINE_SCALE)

    monkeypatch.setattr(daemon_tests, "wait_until", wait_until)
