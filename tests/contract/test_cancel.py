"""Operator actions: cancel, cancel_all and requeue."""

from __future__ import annotations

import pytest

from tests.contract.support import (
    BACKLOG_OPS,
    CLOCK,
    EXTENSIONS,
    RUN_DETAILS,
    FakeClock,
    all_tasks,
    claim,
    make_pipeline,
    new_task,
    only,
    review_pipeline,
    simple_pipeline,
    task_events,
)
from tracker_client.errors import Conflict, LeaseLost, NotFound, ValidationFailed
from tracker_client.models import DEAD_LETTER_NEVER_MS, RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.requires(BACKLOG_OPS)]

UNKNOWN = "00000000-0000-4000-8000-00000000dead"


async def test_cancel_a_waiting_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid, other = await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    result = await tracker.cancel(tid)
    assert (result.task_id, result.stage, result.revoked_lease) == (tid, "todo", False)
    assert result.dead_letter_reason == "cancelled"
    task = await tracker.get_task(tid)
    assert (task.dead_letter_reason, task.stage, task.task_version) == ("cancelled", "todo", 1)
    assert task.next_eligible_at_ms == DEAD_LETTER_NEVER_MS
    assert (await claim(tracker)).task.id == other
    assert await tracker.claim("a", "coder", 60_000) is None


@pytest.mark.requires(RUN_DETAILS)
async def test_cancel_records_a_task_level_event(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    await tracker.cancel(tid)
    event = only(await task_events(tracker, tid), "cancelled")
    assert event.run_id is None
    assert event.data["reason"] == "cancelled"
    assert event.data["from_stage"] == "todo"


async def test_cancel_moves_to_the_dead_letter_stage(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(dead_letter_stage="failed")
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    assert (await tracker.cancel(tid)).stage == "failed"
    task = await tracker.get_task(tid)
    assert (task.stage, task.task_version, task.dead_letter_reason) == ("failed", 2, "cancelled")


async def test_cancel_a_running_task_revokes_its_lease(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    result = await tracker.cancel(tid)
    assert result.revoked_lease is True
    with pytest.raises(LeaseLost) as err:
        await tracker.heartbeat(lease)
    assert err.value.code == "revoked"
    for write in (
        lambda: tracker.add_event(lease, "progress"),
        lambda: tracker.transition(lease, "complete"),
        lambda: tracker.fail(lease, "x"),
    ):
        with pytest.raises(LeaseLost) as err:
            await write()
        assert err.value.code == "revoked"
    task = await tracker.get_task(tid)
    assert (task.stage, task.dead_letter_reason) == ("todo", "cancelled")
    assert task.latest_run is not None
    assert task.latest_run.status == "cancelled"
    assert task.latest_run.ended_at_ms is not None
    assert (await tracker.health()).active_leases == 0
    assert await tracker.claim("b", "coder", 60_000) is None


async def test_cancel_a_finished_task_is_a_conflict(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    fatal = RetryPolicy(max_attempts=0)
    done, dead, cancelled = await tracker.create_tasks(
        [new_task(pid, "done"), new_task(pid, "dead", retry_policy=fatal), new_task(pid, "c")]
    )
    await tracker.transition(await claim(tracker), "complete")
    await tracker.fail(await claim(tracker), "fatal")
    await tracker.cancel(cancelled)
    for tid in (done, dead, cancelled):
        before = await tracker.get_task(tid)
        with pytest.raises(Conflict) as err:
            await tracker.cancel(tid)
        assert err.value.code == "already_finished"
        after = await tracker.get_task(tid)
        assert (after.stage, after.task_version, after.dead_letter_reason) == (
            before.stage,
            before.task_version,
            before.dead_letter_reason,
        )
    with pytest.raises(NotFound):
        await tracker.cancel(UNKNOWN)


async def test_cancel_all_needs_a_filter(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    with pytest.raises(ValidationFailed):
        await tracker.cancel_all()
    assert (await claim(tracker)).task.dead_letter_reason is None


async def test_cancel_all_of_a_pipeline(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    other = await make_pipeline(tracker)
    ids = await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(5)])
    fatal = RetryPolicy(max_attempts=0)
    dead = await tracker.create_task(new_task(pid, "dead", priority=9, retry_policy=fatal))
    keep = await tracker.create_task(new_task(other, "other pipeline"))
    await tracker.fail(await claim(tracker), "fatal")  # dead-lettered: not cancelled again
    await tracker.transition(await claim(tracker), "complete")  # t0 done: not cancelled
    running = await claim(tracker)  # t1 running: cancelled, lease revoked
    assert await tracker.cancel_all(pipeline_id=pid) == 4
    reasons = {t.id: t.dead_letter_reason for t in await all_tasks(tracker)}
    assert reasons == {
        ids[0]: None,
        **dict.fromkeys(ids[1:], "cancelled"),
        dead: "max_attempts_exceeded",
        keep: None,
    }
    with pytest.raises(LeaseLost):
        await tracker.heartbeat(running)
    assert await tracker.cancel_all(pipeline_id=pid) == 0


async def test_cancel_all_of_a_role(tracker: Tracker) -> None:
    reviews = await make_pipeline(tracker, review_pipeline())
    builds = await make_pipeline(tracker, simple_pipeline("builder"))
    a, b = await tracker.create_tasks([new_task(reviews, "a"), new_task(reviews, "b")])
    build = await tracker.create_task(new_task(builds))
    await tracker.transition(await claim(tracker), "complete")  # a waits for a reviewer
    assert await tracker.cancel_all(role="reviewer") == 1
    reasons = {t.id: t.dead_letter_reason for t in await all_tasks(tracker)}
    assert reasons == {a: "cancelled", b: None, build: None}
    assert await tracker.cancel_all(pipeline_id=reviews, role="coder") == 1
    assert (await tracker.get_task(b)).dead_letter_reason == "cancelled"


async def test_requeue_needs_a_dead_letter(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    with pytest.raises(Conflict) as err:
        await tracker.requeue(tid)
    assert err.value.code == "not_dead_lettered"
    with pytest.raises(NotFound):
        await tracker.requeue(UNKNOWN)


async def test_requeue_brings_a_dead_letter_back_where_it_was(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    policy = RetryPolicy(max_attempts=1, dead_letter_stage="parked")
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    await tracker.transition(await claim(tracker), "complete")
    await tracker.fail(await claim(tracker, "reviewer"), "fatal")
    assert (await tracker.get_task(tid)).stage == "parked"

    result = await tracker.requeue(tid)

    assert (result.task_id, result.stage, result.reset_attempts) == (tid, "review", True)
    task = await tracker.get_task(tid)
    assert (task.stage, task.dead_letter_reason, task.next_eligible_at_ms) == ("review", None, 0)
    assert task.task_version == result.task_version == 4  # complete, dead letter move, requeue
    assert "requeued" in [e.kind for e in await task_events(tracker, tid)]
    assert (await claim(tracker, "reviewer")).task.id == tid


async def test_requeue_into_a_named_stage(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    tid = await tracker.create_task(new_task(pid))
    await tracker.cancel(tid)
    with pytest.raises(ValidationFailed) as err:
        await tracker.requeue(tid, stage="nowhere")
    assert "nowhere" in str(err.value)
    assert (await tracker.get_task(tid)).dead_letter_reason == "cancelled"
    assert (await tracker.requeue(tid, stage="review")).stage == "review"
    assert (await claim(tracker, "reviewer")).task.id == tid


async def test_requeue_with_and_without_a_new_attempt_budget(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(
        new_task(pid, retry_policy=RetryPolicy(max_attempts=2, retry_delay_ms=0))
    )
    await tracker.fail(await claim(tracker), "one")
    await tracker.fail(await claim(tracker), "two")
    assert (await tracker.get_task(tid)).dead_letter_reason == "max_attempts_exceeded"

    await tracker.requeue(tid, reset_attempts=False)
    result = await tracker.fail(await claim(tracker), "three")  # 3 failures >= 2
    assert (await tracker.get_task(tid)).dead_letter_reason == "max_attempts_exceeded"
    assert result.dead_lettered in (True, None)

    await tracker.requeue(tid, reset_attempts=True)
    await tracker.fail(await claim(tracker), "first of the new budget")
    assert (await tracker.get_task(tid)).dead_letter_reason is None
    await tracker.fail(await claim(tracker), "second of the new budget")
    assert (await tracker.get_task(tid)).dead_letter_reason == "max_attempts_exceeded"


async def test_requeue_a_cancelled_running_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    first = await claim(tracker)
    await tracker.cancel(tid)
    await tracker.requeue(tid)
    second = await claim(tracker, agent="agent-2")
    assert (second.task.id, second.run.attempt) == (tid, 2)
    with pytest.raises(LeaseLost):
        await tracker.transition(first, "complete")
    await tracker.transition(second, "complete")


@pytest.mark.requires(CLOCK)
async def test_requeue_resets_the_stale_streak(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    for _ in range(3):
        await claim(tracker, ttl_ms=1_000)
        clock.advance(1_001)
    assert await tracker.claim("a", "coder", 60_000) is None
    assert (await tracker.get_task(tid)).dead_letter_reason == "crash_loop"
    await tracker.requeue(tid)
    await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    # one more expiry after the requeue is a streak of one, not four
    lease = await claim(tracker)
    assert (lease.task.id, lease.run.attempt) == (tid, 5)


@pytest.mark.requires(CLOCK, EXTENSIONS)
async def test_requeued_expired_task_does_not_expire_again_at_once(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, queue_ttl_ms=1_000))
    clock.advance(1_001)
    assert await tracker.claim("a", "coder", 60_000) is None
    assert (await tracker.get_task(tid)).dead_letter_reason == "expired"
    await tracker.requeue(tid)
    assert (await claim(tracker)).task.id == tid


async def test_a_keyed_cancel_requeue_and_cancel_all_replay_their_first_answer(
    tracker: Tracker,
) -> None:
    # A client retrying after a lost answer sends the same key: it gets the first answer, not
    # the Conflict (already cancelled) or the 0 (nothing left) a second run would give.
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    first = await tracker.cancel(tid, reason="stop", idempotency_key="k-cancel")
    assert await tracker.cancel(tid, reason="stop", idempotency_key="k-cancel") == first
    with pytest.raises(Conflict):
        await tracker.cancel(tid, reason="stop")  # unkeyed: it is cancelled already
    with pytest.raises(Conflict) as info:
        await tracker.cancel(tid, reason="other", idempotency_key="k-cancel")
    assert info.value.code == "idempotency_conflict"
    again = await tracker.requeue(tid, idempotency_key="k-requeue")
    assert await tracker.requeue(tid, idempotency_key="k-requeue") == again
    assert (await tracker.get_task(tid)).dead_letter_reason is None  # requeued once
    await tracker.create_tasks([new_task(pid, "b"), new_task(pid, "c")])
    assert await tracker.cancel_all(pipeline_id=pid, idempotency_key="k-all") == 3
    assert await tracker.cancel_all(pipeline_id=pid, idempotency_key="k-all") == 3
    assert await tracker.cancel_all(pipeline_id=pid) == 0
