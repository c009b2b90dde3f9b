"""Heartbeats follow the work: none once the executor has ended, unless the report needs one.

On a real NullTickets server every heartbeat resets the lease to 300 s (see
docs/guarantees/nulltickets.md), so a heartbeat sent while the final report is retrying means a
worker killed then strands the task for 5 minutes. The fake NullTickets here models that trap;
the runs are real :class:`~worker.run.TaskRun` objects through the real HTTP client.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import httpx
import pytest

from plugins.api import ExecutionContext
from tests.remote.fake_nulltickets import FakeNullTickets
from tests.worker.conftest import FnExecutor
from tests.worker.runkit import claim_one, run_task, settings
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ADMIN = "admin-secret-token"
#: The client's own retries kept small: the run's retries are what is under test.
CLIENT_RETRY = RetrySettings(attempts=2, initial_s=0.001, max_wait_s=0.005, budget_s=1.0)
TTL_S = 0.9


class Recorder:
    """The fake's handler behind a log of (time, method, path), and an optional outage."""

    def __init__(self, fake: FakeNullTickets) -> None:
        self.fake = fake
        self.log: list[tuple[float, str, str]] = []
        #: path suffix -> until when (time.monotonic()) it answers 503.
        self.down_until: dict[str, float] = {}

    def handle(self, request: httpx.Request) -> httpx.Response:
        now = time.monotonic()
        self.log.append((now, request.method, request.url.path))
        for suffix, until in self.down_until.items():
            if request.url.path.endswith(suffix) and now < until:
                return httpx.Response(503, json={"error": {"code": "unavailable", "message": ""}})
        return self.fake.handle(request)

    def heartbeats_after(self, t: float) -> int:
        return sum(1 for ts, _, path in self.log if ts >= t and path.endswith("/heartbeat"))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder(FakeNullTickets(api_token=ADMIN))


@pytest.fixture
async def tracker(recorder: Recorder) -> AsyncIterator[RemoteTracker]:
    remote = RemoteTracker(
        "http://127.0.0.1:7700",
        api_token=ADMIN,
        retry=CLIENT_RETRY,
        transport=httpx.MockTransport(recorder.handle),
    )
    try:
        yield remote
    finally:
        await remote.aclose()


def busy_for(seconds: float, ended: list[float]) -> Callable[[ExecutionContext], object]:
    async def work(ctx: ExecutionContext) -> None:
        await anyio.sleep(seconds)
        ended.append(time.monotonic())

    return work


async def test_no_heartbeat_after_the_executor_ended_when_the_report_is_quick(
    tracker: RemoteTracker, recorder: Recorder, tmp_path: Path
) -> None:
    lease = await claim_one(tracker, ttl_s=TTL_S)
    ended: list[float] = []
    # Long enough for several heartbeats while it runs (every TTL/3).
    executor = FnExecutor(busy_for(TTL_S * 1.5, ended))
    result = await run_task(tracker, lease, executor, settings(tmp_path, ttl_s=TTL_S))
    assert result.status == "transitioned"
    assert recorder.heartbeats_after(0) >= 2  # the executor was kept alive...
    assert recorder.heartbeats_after(ended[0]) == 0  # ...and nothing once it had ended


async def test_a_report_retrying_past_the_lease_heartbeats_and_lands(
    tracker: RemoteTracker, recorder: Recorder, tmp_path: Path
) -> None:
    lease = await claim_one(tracker, ttl_s=TTL_S)
    ended: list[float] = []

    async def work(ctx: ExecutionContext) -> None:
        # The transition is refused (503) for twice the lease: the report must keep the lease.
        recorder.down_until["/transition"] = time.monotonic() + 2 * TTL_S
        ended.append(time.monotonic())

    result = await run_task(tracker, lease, FnExecutor(work), settings(tmp_path, ttl_s=TTL_S))
    assert result.status == "transitioned", result
    beats = recorder.heartbeats_after(ended[0])
    # Only as many as the outage needed: about one per TTL/3 of it, none when it was quick.
    assert 1 <= beats <= 2 * TTL_S / (TTL_S / 3) + 1
