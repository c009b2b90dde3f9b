"""wait() and wait_for_work(): outcomes, timeouts and wake-ups by writes of other tasks."""

from __future__ import annotations

import anyio
import pytest
from anyio.abc import TaskGroup, TaskStatus

from tests.contract.support import (
    BACKLOG_OPS,
    CLOCK,
    EXTENSIONS,
    MULTI_INSTANCE,
    WAIT,
    FakeClock,
    OpenTracker,
    claim,
    make_pipeline,
    new_task,
)
from tracker_client.models import ArtifactCreate, RetryPolicy
from tracker_client.ops_models import WaitResult
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.requires(WAIT)]

#: Long enough never to be reached when the wake-up works; the test deadline catches a hang.
LONG_S = 30.0


async def _wait_in_background(tg: TaskGroup, tracker: Tracker, task_id: str) -> list[WaitResult]:
    """Start ``wait`` in ``tg``; its result lands in the returned list when it returns."""
    results: list[WaitResult] = []

    async def waiter(*, task_status: TaskStatus[None]) -> None:
        task_status.started()
        results.append(await tracker.wait(task_id, timeout_s=LONG_S))

    await tg.start(waiter)
    return results


async def test_wait_returns_done_with_artifacts_and_result(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            results = await _wait_in_background(tg, tracker, tid)
            lease = await claim(tracker)
            await tracker.add_event(lease, "result", {"answer": 41})
            await tracker.add_event(lease, "result", {"answer": 42})
            await tracker.add_event(lease, "progress", {"pct": 100})
            await tracker.add_artifact(
                ArtifactCreate(kind="file", uri="file:///out", task_id=tid, run_id=lease.run.id)
            )
            await tracker.transition(lease, "complete")
    (result,) = results
    assert (result.finished, result.outcome) == (True, "done")
    assert result.task.stage == "done"
    assert result.task.latest_run is not None
    assert result.task.latest_run.status == "completed"
    assert [a.uri for a in result.artifacts] == ["file:///out"]
    assert result.result_event is not None
    assert (result.result_event.kind, result.result_event.data) == ("result", {"answer": 42})


async def test_wait_on_a_finished_task_returns_at_once(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    await tracker.transition(await claim(tracker), "complete")
    with anyio.fail_after(5):
        result = await tracker.wait(tid, timeout_s=LONG_S)
    assert (result.finished, result.outcome) == (True, "done")
    assert result.result_event is None


async def test_wait_returns_dead_lettered(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, retry_policy=RetryPolicy(max_attempts=1)))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            results = await _wait_in_background(tg, tracker, tid)
            await tracker.fail(await claim(tracker), "fatal")
    assert (results[0].finished, results[0].outcome) == (True, "dead_lettered")
    assert results[0].task.dead_letter_reason == "max_attempts_exceeded"


@pytest.mark.requires(BACKLOG_OPS)
async def test_wait_returns_cancelled(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            results = await _wait_in_background(tg, tracker, tid)
            await claim(tracker)
            await tracker.cancel(tid)
    assert (results[0].finished, results[0].outcome) == (True, "cancelled")


@pytest.mark.requires(CLOCK, EXTENSIONS, BACKLOG_OPS)
async def test_wait_returns_expired(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, queue_ttl_ms=1_000))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            results = await _wait_in_background(tg, tracker, tid)
            clock.advance(1_001)
            await tracker.maintenance()
    assert (results[0].finished, results[0].outcome) == (True, "expired")


async def test_wait_timeout_leaves_the_task_alone(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    before = await tracker.get_task(tid)
    with anyio.fail_after(10):
        result = await tracker.wait(tid, timeout_s=0.2)
    assert (result.finished, result.outcome) == (False, "pending")
    assert result.task.stage == "todo"
    after = await tracker.get_task(tid)
    assert (after.stage, after.task_version, after.dead_letter_reason) == (
        before.stage,
        before.task_version,
        None,
    )
    assert (await claim(tracker)).task.id == tid


@pytest.mark.requires(MULTI_INSTANCE)
async def test_wait_is_woken_by_a_write_of_another_instance(open_tracker: OpenTracker) -> None:
    # Two trackers on one rail: the writer's commit must reach the other instance's waiter
    # (the embedded tracker polls PRAGMA data_version for writes of other connections).
    waiter_side = await open_tracker()
    writer_side = await open_tracker()
    pid = await make_pipeline(writer_side)
    tid = await writer_side.create_task(new_task(pid))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            results = await _wait_in_background(tg, waiter_side, tid)
            await writer_side.transition(await claim(writer_side), "complete")
    assert (results[0].finished, results[0].outcome) == (True, "done")


async def _idle_until_woken(idle_side: Tracker, writer_side: Tracker, pipeline_id: str) -> int:
    """Run ``wait_for_work(LONG_S)`` on ``idle_side`` while ``writer_side`` creates tasks.

    A write that lands before the waiter has taken its baseline can't wake it, so the writer
    keeps writing (every 50 ms, up to the deadline) until the waiter returns; returns the number
    of tasks written.
    """
    woke = anyio.Event()
    written = 0

    async def idle(*, task_status: TaskStatus[None]) -> None:
        task_status.started()
        await idle_side.wait_for_work(LONG_S)
        woke.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(idle)
            while not woke.is_set():
                await writer_side.create_task(new_task(pipeline_id))
                written += 1
                with anyio.move_on_after(0.05):
                    await woke.wait()
    return written


async def test_wait_for_work_wakes_up_on_a_new_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    written = await _idle_until_woken(tracker, tracker, pid)
    assert written >= 1
    assert (await claim(tracker)).task.title == "task"


@pytest.mark.requires(MULTI_INSTANCE)
async def test_wait_for_work_wakes_up_on_another_instance_write(
    open_tracker: OpenTracker,
) -> None:
    idle_side = await open_tracker()
    writer_side = await open_tracker()
    pid = await make_pipeline(writer_side)
    written = await _idle_until_woken(idle_side, writer_side, pid)
    assert written >= 1
    assert (await claim(idle_side)).task.title == "task"


async def test_wait_for_work_times_out_without_work(tracker: Tracker) -> None:
    start = anyio.current_time()
    with anyio.fail_after(10):
        await tracker.wait_for_work(0.2)
    assert anyio.current_time() - start >= 0.15  # it waited: nothing woke it


async def test_wait_for_work_since_its_mark_sees_a_write_made_between_two_waits(
    tracker: Tracker,
) -> None:
    """The mark a wait answers, passed back as ``since``, ends the next wait at once when a
    write landed while nobody waited (a worker's watch pausing between two waits); with
    nothing written since, the next wait lasts its timeout."""
    pid = await make_pipeline(tracker)
    await tracker.wait_for_work(0.01)  # the rail's wake-up listener is up from here on
    mark = await tracker.wait_for_work(0)
    await tracker.create_task(new_task(pid))  # nobody waits now
    with anyio.fail_after(10):
        after = await tracker.wait_for_work(LONG_S, since=mark)
    assert after != mark
    start = anyio.current_time()
    with anyio.fail_after(10):
        assert await tracker.wait_for_work(0.2, since=after) == after
    assert anyio.current_time() - start >= 0.15  # it waited: nothing woke it
