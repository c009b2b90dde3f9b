"""On a plain NullTickets server (whose own default is unlimited attempts, no delay) the client
sends the bounded default NullTickets can express: 5 attempts, a constant 1 s apart."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tracker_client.models import RetryPolicy, TaskCreate
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings

pytestmark = pytest.mark.anyio

ADMIN = "admin-secret-token"


@pytest.fixture
async def remote() -> AsyncIterator[tuple[RemoteTracker, FakeNullTickets]]:
    fake = FakeNullTickets(api_token=ADMIN)
    tracker = RemoteTracker(
        "http://127.0.0.1:7700",
        api_token=ADMIN,
        retry=RetrySettings(attempts=1),
        transport=fake.transport(),
    )
    try:
        yield tracker, fake
    finally:
        await tracker.aclose()


async def test_no_policy_is_bounded_there_too(
    remote: tuple[RemoteTracker, FakeNullTickets],
) -> None:
    tracker, _fake = remote
    pid = await tracker.create_pipeline("p", PIPELINE)
    tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
    task = await tracker.get_task(tid)
    assert (task.max_attempts, task.retry_delay_ms) == (5, 1_000)


async def test_given_fields_are_kept_and_unlimited_stays_unlimited(
    remote: tuple[RemoteTracker, FakeNullTickets],
) -> None:
    tracker, _fake = remote
    pid = await tracker.create_pipeline("p", PIPELINE)
    ids = await tracker.create_tasks(
        [
            TaskCreate(pipeline_id=pid, title="delay", retry_policy=RetryPolicy(retry_delay_ms=0)),
            TaskCreate(pipeline_id=pid, title="ten", retry_policy=RetryPolicy(max_attempts=10)),
            TaskCreate(pipeline_id=pid, title="inf", retry_policy=RetryPolicy(max_attempts=None)),
        ]
    )
    got = [await tracker.get_task(i) for i in ids]
    assert [(t.max_attempts, t.retry_delay_ms) for t in got] == [(5, 0), (10, 1_000), (None, 1_000)]
