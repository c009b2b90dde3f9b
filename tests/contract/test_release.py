"""Release: a worker shutting down gives its unfinished task back without spending an attempt.

Before, the worker failed the run (``worker_shutdown``): a task with ``max_attempts`` 1 was
dead-lettered by one ``SIGTERM``, and any task waited out its retry delay.
"""

from __future__ import annotations

import pytest

from tests.contract.support import (
    RELEASE,
    RUN_DETAILS,
    claim,
    kinds,
    make_pipeline,
    new_task,
    run_events,
)
from tracker_client.errors import LeaseLost
from tracker_client.models import RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.requires(RELEASE)]


async def test_release_keeps_the_attempt_budget_and_the_task_claimable_at_once(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(max_attempts=1, retry_delay_ms=3_600_000)
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    for _ in range(3):  # three restarts in a row cost nothing
        lease = await claim(tracker)
        result = await tracker.release(lease, "worker_shutdown")
        assert (result.released, result.reason) == (True, "worker_shutdown")
        assert "released" in kinds(await run_events(tracker, lease.run.id))
    lease = await claim(tracker)  # at once: no retry delay
    assert lease.run.attempt == 4
    await tracker.transition(lease, "complete")
    task = await tracker.get_task(tid)
    assert (task.stage, task.dead_letter_reason) == ("done", None)


async def test_a_released_lease_is_gone(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    await tracker.release(lease)
    with pytest.raises(LeaseLost):
        await tracker.heartbeat(lease)
    with pytest.raises(LeaseLost):
        await tracker.fail(lease, "late")
    with pytest.raises(LeaseLost):
        await tracker.release(lease)


async def test_the_last_attempt_still_counts_after_releases(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, retry_policy=RetryPolicy(max_attempts=1)))
    await tracker.release(await claim(tracker))
    result = await tracker.fail(await claim(tracker), "a real failure")
    assert result.dead_lettered is True
    assert (await tracker.get_task(tid)).dead_letter_reason == "max_attempts_exceeded"


@pytest.mark.requires(RUN_DETAILS)
async def test_the_released_run_is_visible(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    await tracker.release(lease, "worker_shutdown")
    (run,) = await tracker.list_runs(tid)
    assert run.status == "released"
    assert run.ended_at_ms is not None
    assert run.error is not None and "worker_shutdown" in run.error
    assert (await tracker.queue_stats()).roles[0].failed_count == 0
