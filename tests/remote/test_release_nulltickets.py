"""``release`` on a plain NullTickets server: no such route, and its ``fail`` always counts an
attempt, so the client sends nothing and leaves the lease to expire (``released=False``)."""

from __future__ import annotations

import pytest

from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tracker_client.models import RetryPolicy, TaskCreate
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings

pytestmark = pytest.mark.anyio

ADMIN = "admin-secret-token"


async def test_release_writes_nothing_and_spends_no_attempt() -> None:
    fake = FakeNullTickets(api_token=ADMIN)
    tracker = RemoteTracker(
        "http://127.0.0.1:7700",
        api_token=ADMIN,
        retry=RetrySettings(attempts=1),
        transport=fake.transport(),
    )
    try:
        pid = await tracker.create_pipeline("p", PIPELINE)
        policy = RetryPolicy(max_attempts=1)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t", retry_policy=policy))
        lease = await tracker.claim("agent-1", "coder", 60_000)
        assert lease is not None
        sent = len(fake.requests)
        result = await tracker.release(lease, "worker_shutdown")
        assert result.released is False
        assert [r.url.path for r in fake.requests[sent:]] == []  # not a fail, nothing at all
        task = await tracker.get_task(tid)
        assert task.dead_letter_reason is None
    finally:
        await tracker.aclose()
