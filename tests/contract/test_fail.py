"""Fail: retry delay, exponential backoff, dead letters, and what fail tells the caller."""

from __future__ import annotations

import pytest

from tests.contract.support import (
    CLOCK,
    EXTENSIONS,
    RUN_DETAILS,
    FakeClock,
    claim,
    make_pipeline,
    new_task,
    only,
    review_pipeline,
    run_events,
)
from tracker_client.models import DEAD_LETTER_NEVER_MS, RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


@pytest.mark.requires(CLOCK)
async def test_fail_schedules_a_retry_after_the_delay(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(max_attempts=3, retry_delay_ms=5_000)
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    lease = await claim(tracker)
    failed_at = clock()

    result = await tracker.fail(lease, "boom")

    assert result.status == "failed"
    assert result.retry_scheduled is True
    assert result.dead_lettered is False
    assert result.next_eligible_at_ms == failed_at + 5_000
    task = await tracker.get_task(tid)
    assert (task.stage, task.task_version, task.dead_letter_reason) == ("todo", 1, None)
    assert task.next_eligible_at_ms == failed_at + 5_000
    event = only(await run_events(tracker, lease.run.id), "retry_scheduled")
    assert event.data == {
        "reason": "retry_scheduled",
        "failed_attempts": 1,
        "retry_delay_ms": 5_000,
        "next_eligible_at_ms": failed_at + 5_000,
    }
    assert await tracker.claim("a", "coder", 60_000) is None
    clock.advance(4_999)
    assert await tracker.claim("a", "coder", 60_000) is None
    clock.advance(1)
    assert (await claim(tracker)).run.attempt == 2


@pytest.mark.requires(RUN_DETAILS)
async def test_fail_error_and_usage_are_readable_on_the_run(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    await tracker.fail(lease, "executor exited 3: out of memory", usage={"tokens": 7})
    (run,) = await tracker.list_runs(tid)
    assert run.status == "failed"
    assert run.ended_at_ms is not None
    assert run.error == "executor exited 3: out of memory"
    assert run.usage == {"tokens": 7}
    latest = (await tracker.get_task(tid)).latest_run
    assert latest is not None
    assert latest.error == "executor exited 3: out of memory"


@pytest.mark.requires(CLOCK, EXTENSIONS)
async def test_exponential_backoff_stays_within_its_bounds(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(
        max_attempts=None, retry_delay_ms=1_000, backoff="exponential", max_retry_delay_ms=5_000
    )
    await tracker.create_tasks([new_task(pid, f"t{i}", retry_policy=policy) for i in range(12)])
    bounds = {1: 1_000, 2: 2_000, 3: 4_000, 4: 5_000, 5: 5_000}
    delays: dict[int, list[int]] = {k: [] for k in bounds}
    for failures in bounds:
        leases = [await claim(tracker) for _ in range(12)]  # hold all: 12 distinct tasks
        for lease in leases:
            result = await tracker.fail(lease, "again")
            assert result.retry_scheduled is True
            assert result.next_eligible_at_ms is not None
            delay = result.next_eligible_at_ms - clock()
            assert 0 <= delay <= bounds[failures], (failures, delay)
            event = only(await run_events(tracker, lease.run.id), "retry_scheduled")
            assert event.data["failed_attempts"] == failures
            assert event.data["retry_delay_ms"] == delay
            delays[failures].append(delay)
        clock.advance(5_001)
    # full jitter over a growing range: a constant 1 s delay would never exceed 1 s
    assert max(delays[4] + delays[5]) > 1_000


@pytest.mark.requires(RUN_DETAILS)
async def test_dead_letter_in_place(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(
        new_task(pid, retry_policy=RetryPolicy(max_attempts=2, retry_delay_ms=0))
    )
    first = await tracker.fail(await claim(tracker), "one")
    assert (first.retry_scheduled, first.dead_lettered) == (True, False)
    lease = await claim(tracker)
    result = await tracker.fail(lease, "two")
    assert result.dead_lettered is True
    assert result.retry_scheduled is False
    assert result.dead_letter_reason == "max_attempts_exceeded"
    task = await tracker.get_task(tid)
    assert task.stage == "todo"
    assert task.task_version == 1
    assert task.dead_letter_reason == "max_attempts_exceeded"
    assert task.next_eligible_at_ms == DEAD_LETTER_NEVER_MS
    event = only(await run_events(tracker, lease.run.id), "dead_letter")
    assert event.data == {
        "reason": "max_attempts_exceeded",
        "failed_attempts": 2,
        "from_stage": "todo",
        "dead_letter_stage": None,
    }
    assert await tracker.claim("a", "coder", 60_000) is None


async def test_dead_letter_into_its_stage_is_never_claimable(tracker: Tracker) -> None:
    # 'parked' has a role; a dead-lettered task there must still not be handed out.
    pid = await make_pipeline(tracker, review_pipeline())
    policy = RetryPolicy(max_attempts=1, dead_letter_stage="parked")
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    lease = await claim(tracker)
    result = await tracker.fail(lease, "fatal")
    assert result.dead_lettered in (True, None)
    task = await tracker.get_task(tid)
    assert (task.stage, task.task_version) == ("parked", 2)
    assert task.dead_letter_reason == "max_attempts_exceeded"
    event = only(await run_events(tracker, lease.run.id), "dead_letter")
    assert event.data["from_stage"] == "todo"
    assert event.data["dead_letter_stage"] == "parked"
    assert await tracker.claim("t", "triager", 60_000) is None
    assert await tracker.claim("c", "coder", 60_000) is None


async def test_max_attempts_zero_dead_letters_on_the_first_failure(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, retry_policy=RetryPolicy(max_attempts=0)))
    lease = await claim(tracker)  # still claimed once
    await tracker.fail(lease, "fatal")
    assert (await tracker.get_task(tid)).dead_letter_reason == "max_attempts_exceeded"
    assert await tracker.claim("a", "coder", 60_000) is None


async def test_failures_count_across_stages(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    tid = await tracker.create_task(
        new_task(pid, retry_policy=RetryPolicy(max_attempts=2, retry_delay_ms=0))
    )
    await tracker.fail(await claim(tracker), "first, in todo")
    await tracker.transition(await claim(tracker), "complete")
    await tracker.fail(await claim(tracker, "reviewer"), "second, in review")
    task = await tracker.get_task(tid)
    assert (task.stage, task.dead_letter_reason) == ("review", "max_attempts_exceeded")


async def test_unlimited_retries_when_asked_for(tracker: Tracker) -> None:
    # max_attempts null is unlimited (NullTickets' reading); the default is bounded
    # (tests/contract/test_retry_defaults.py).
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(
        new_task(pid, retry_policy=RetryPolicy(max_attempts=None, retry_delay_ms=0))
    )
    for attempt in range(1, 8):
        lease = await claim(tracker)
        assert lease.run.attempt == attempt
        await tracker.fail(lease, f"failure {attempt}")
    assert (await tracker.get_task(tid)).dead_letter_reason is None


@pytest.mark.requires(EXTENSIONS, RUN_DETAILS)
async def test_permanent_failure_dead_letters_at_once(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(max_attempts=5, dead_letter_stage="failed")
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    result = await tracker.fail(await claim(tracker), "executor misconfigured", retryable=False)
    assert result.dead_lettered is True
    assert result.retry_scheduled is False
    assert result.dead_letter_reason == "permanent_failure"
    task = await tracker.get_task(tid)
    assert (task.stage, task.dead_letter_reason) == ("failed", "permanent_failure")
