"""Delayed tasks (extension ``delayed_tasks``): ``run_at_ms`` / ``delay_ms`` at creation.

A delayed task is not claimable before its time, a ``run_at_ms`` in the past is due now, and a
negative delay or a time more than ten years ahead is refused naming the field, writing nothing.
``queue_stats`` counts it as scheduled (not as a retry), ``get_task`` shows ``run_at_ms``.
Runs on every tracker of the contract suite (embedded, served over ASGI and TCP).
"""

from __future__ import annotations

import pytest

from tests.contract.support import FakeClock, all_tasks, make_pipeline, new_task
from tracker_client.errors import ValidationFailed
from tracker_client.protocol import Tracker
from tracker_client.rules.createopts import MAX_AHEAD_MS

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_delay_ms_is_not_claimable_before_its_time(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    created = clock.now_ms
    (tid,) = await tracker.create_tasks([new_task(pid, "later", delay_ms=600_000)])
    task = await tracker.get_task(tid)
    assert task.run_at_ms == created + 600_000
    assert task.next_eligible_at_ms == created + 600_000
    assert await tracker.claim("a", "coder", 60_000) is None
    stats = (await tracker.queue_stats()).for_role("coder")
    assert stats is not None
    assert (stats.scheduled_count, stats.next_scheduled_at_ms) == (1, created + 600_000)
    assert (stats.retry_waiting_count, stats.claimable_count, stats.waiting_count) == (0, 0, 1)
    clock.advance(599_999)
    assert await tracker.claim("a", "coder", 60_000) is None
    clock.advance(1)
    lease = await tracker.claim("a", "coder", 60_000)
    assert lease is not None and lease.task.id == tid
    stats = (await tracker.queue_stats()).for_role("coder")
    assert stats is not None and stats.scheduled_count == 0


async def test_run_at_in_the_future_waits_and_in_the_past_is_due_now(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    now = clock.now_ms
    late, past = await tracker.create_tasks(
        [
            new_task(pid, "late", run_at_ms=now + 5_000, priority=9),
            new_task(pid, "past", run_at_ms=now - 5_000),
        ]
    )
    assert (await tracker.get_task(past)).run_at_ms == now - 5_000
    first = await tracker.claim("a", "coder", 60_000)
    assert first is not None and first.task.id == past
    assert await tracker.claim("a", "coder", 60_000) is None
    clock.advance(5_000)
    second = await tracker.claim("a", "coder", 60_000)
    assert second is not None and second.task.id == late


async def test_an_undelayed_task_has_no_run_at(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    (tid,) = await tracker.create_tasks([new_task(pid)])
    task = await tracker.get_task(tid)
    assert (task.run_at_ms, task.next_eligible_at_ms) == (None, 0)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"delay_ms": -1}, "delay_ms must not be negative"),
        ({"run_at_ms": -5}, "run_at_ms must not be negative"),
        ({"delay_ms": MAX_AHEAD_MS + 1}, "delay_ms is more than ten years ahead"),
        ({"run_at_ms": 10**17}, "run_at_ms is more than ten years ahead"),
        ({"delay_ms": 5, "run_at_ms": 5}, "give run_at_ms or delay_ms, not both"),
        ({"delay_ms": 60_000, "queue_ttl_ms": 60_000}, "would expire .* before it is due"),
    ],
)
async def test_bad_delays_are_refused_naming_the_field_and_write_nothing(
    tracker: Tracker, fields: dict[str, int], named: str
) -> None:
    pid = await make_pipeline(tracker)
    with pytest.raises(ValidationFailed, match=named):
        await tracker.create_tasks([new_task(pid, "ok"), new_task(pid, "bad", **fields)])
    assert await all_tasks(tracker) == []
