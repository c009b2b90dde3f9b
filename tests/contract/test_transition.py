"""Transition: effects, optimistic checks, invalid triggers, and the task_version rules."""

from __future__ import annotations

import pytest

from tests.contract.support import (
    CLOCK,
    RUN_DETAILS,
    FakeClock,
    claim,
    make_pipeline,
    new_task,
    only,
    review_pipeline,
    run_events,
    simple_pipeline,
)
from tracker_client.errors import Conflict, InvalidTransition
from tracker_client.models import ArtifactCreate, RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


async def test_transition_moves_the_task_and_closes_the_run(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker)

    result = await tracker.transition(
        lease, "complete", expected_stage="todo", expected_task_version=1
    )

    assert (result.previous_stage, result.new_stage, result.trigger) == (
        "todo",
        "review",
        "complete",
    )
    task = await tracker.get_task(tid)
    assert (task.stage, task.task_version) == ("review", 2)
    assert task.next_eligible_at_ms == 0
    assert task.dead_letter_reason is None
    assert task.latest_run is not None
    assert task.latest_run.status == "completed"
    assert task.latest_run.ended_at_ms is not None
    assert [(t.trigger, t.to, t.required_gates) for t in task.available_transitions] == [
        ("approve", "done", []),
        ("reject", "todo", ["tests"]),
    ]


@pytest.mark.requires(RUN_DETAILS)
async def test_transition_usage_is_readable_on_the_run(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    await tracker.transition(await claim(tracker), "complete", usage={"tokens": 1234})
    (run,) = await tracker.list_runs(tid)
    assert run.status == "completed"
    assert run.usage == {"tokens": 1234}


async def test_transition_event_instructions(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    # from the pipeline definition
    lease = await claim(tracker)
    await tracker.transition(lease, "complete")
    event = only(await run_events(tracker, lease.run.id), "transition")
    assert event.data == {
        "trigger": "complete",
        "from": "todo",
        "to": "review",
        "instructions": "review it",
    }
    assert event.run_id == lease.run.id
    # from the request, which wins
    lease = await claim(tracker)
    await tracker.transition(lease, "complete", instructions="look at the tests")
    event = only(await run_events(tracker, lease.run.id), "transition")
    assert event.data["instructions"] == "look at the tests"
    # none anywhere -> ""
    lease = await claim(tracker, "reviewer")
    await tracker.transition(lease, "approve")
    event = only(await run_events(tracker, lease.run.id), "transition")
    assert event.data == {"trigger": "approve", "from": "review", "to": "done", "instructions": ""}


async def test_required_gates_are_informational(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    tid = await tracker.create_task(new_task(pid))
    await tracker.transition(await claim(tracker), "complete")
    await tracker.transition(await claim(tracker, "reviewer"), "reject")
    assert (await tracker.get_task(tid)).stage == "todo"


async def test_expected_stage_mismatch_keeps_everything(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    with pytest.raises(Conflict) as err:
        await tracker.transition(lease, "complete", expected_stage="review")
    assert err.value.code == "expected_stage_mismatch"
    task = await tracker.get_task(tid)
    assert (task.stage, task.task_version) == ("todo", 1)
    await tracker.heartbeat(lease)  # lease kept
    await tracker.transition(lease, "complete", expected_stage="todo")


async def test_task_version_mismatch_keeps_everything(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    with pytest.raises(Conflict) as err:
        await tracker.transition(lease, "complete", expected_task_version=7)
    assert err.value.code == "task_version_mismatch"
    task = await tracker.get_task(tid)
    assert (task.stage, task.task_version) == ("todo", 1)
    assert task.latest_run is not None
    assert task.latest_run.status == "running"
    await tracker.transition(lease, "complete", expected_task_version=1)


async def test_invalid_trigger_lists_the_allowed_ones_and_keeps_the_lease(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    with pytest.raises(InvalidTransition) as err:
        await tracker.transition(lease, "approve")
    assert err.value.allowed == ["complete"]
    assert "approve" in str(err.value)
    assert "complete" in str(err.value)
    task = await tracker.get_task(tid)
    assert (task.stage, task.task_version) == ("todo", 1)
    assert task.latest_run is not None
    assert task.latest_run.status == "running"
    await tracker.heartbeat(lease)
    await tracker.transition(lease, "complete")

    lease = await claim(tracker, "reviewer")
    with pytest.raises(InvalidTransition) as err:
        await tracker.transition(lease, "complete")
    assert sorted(err.value.allowed) == ["approve", "reject"]
    for trigger in ("approve", "reject"):
        assert trigger in str(err.value)


async def test_get_task_before_any_claim(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    tid = await tracker.create_task(new_task(pid, "t", description="d", priority=4))
    task = await tracker.get_task(tid)
    assert (task.id, task.pipeline_id, task.stage, task.title, task.description) == (
        tid,
        pid,
        "todo",
        "t",
        "d",
    )
    assert (task.priority, task.task_version, task.next_eligible_at_ms) == (4, 1, 0)
    assert task.latest_run is None
    assert task.dependencies == []
    assert task.assignments == []
    assert [(t.trigger, t.to) for t in task.available_transitions] == [("complete", "review")]


@pytest.mark.requires(CLOCK)
async def test_version_is_unchanged_by_everything_but_transitions_and_dead_letter_moves(
    tracker: Tracker, clock: FakeClock
) -> None:
    # As NullTickets (docs/guarantees/nulltickets.md): claim, heartbeat, events, artifacts, a
    # retrying fail, assignment and dependency changes and lease expiry leave task_version alone.
    pid = await make_pipeline(tracker)
    other = await make_pipeline(tracker, simple_pipeline("builder"))
    upstream = await tracker.create_task(new_task(other))
    tid = await tracker.create_task(
        new_task(pid, retry_policy=RetryPolicy(retry_delay_ms=0))
    )  # retry at once

    async def version() -> int:
        return (await tracker.get_task(tid)).task_version

    lease = await claim(tracker, ttl_ms=1_000)
    await tracker.heartbeat(lease)
    await tracker.add_event(lease, "progress", {"pct": 10})
    await tracker.add_artifact(ArtifactCreate(kind="log", uri="mem://1", task_id=tid))
    await tracker.assign(tid, "agent-1")
    await tracker.unassign(tid, "agent-1")
    assert await version() == 1
    await tracker.fail(lease, "transient")  # a retry, not a dead letter
    assert await version() == 1
    lease = await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    assert await tracker.claim("b", "builder", 60_000) is not None  # runs the expiry cleanup
    assert await version() == 1
    await tracker.add_dependency(tid, upstream)
    assert await version() == 1


async def test_dead_letter_in_place_keeps_the_version(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, retry_policy=RetryPolicy(max_attempts=1)))
    await tracker.fail(await claim(tracker), "fatal")
    task = await tracker.get_task(tid)
    assert (task.stage, task.task_version, task.dead_letter_reason) == (
        "todo",
        1,
        "max_attempts_exceeded",
    )


async def test_dead_letter_into_a_stage_bumps_the_version(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(max_attempts=1, dead_letter_stage="failed")
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    await tracker.fail(await claim(tracker), "fatal")
    task = await tracker.get_task(tid)
    assert (task.stage, task.task_version, task.dead_letter_reason) == (
        "failed",
        2,
        "max_attempts_exceeded",
    )
