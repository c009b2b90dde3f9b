"""Human steps (extension ``human_steps``): a stage marked ``"human": true`` has no role; an
operator moves a task waiting there with ``transition_task``, with a worker transition's
optimistic checks, and the instructions reach the next run as a worker's would."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.support import (
    BACKLOG_OPS,
    STRICT_DEFINITIONS,
    claim,
    make_pipeline,
    new_task,
    task_events,
)
from tracker_client.errors import Conflict, InvalidTransition, NotFound, ValidationFailed
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.requires("human_steps")]

UNKNOWN = "00000000-0000-4000-8000-00000000a11d"


def approval_pipeline() -> dict[str, Any]:
    """draft (writer) --submit--> approval (a human) --approve--> done | --reject--> draft."""
    return {
        "initial": "draft",
        "states": {
            "draft": {"agent_role": "writer"},
            "approval": {"human": True, "description": "a person reads it"},
            "done": {"terminal": True},
        },
        "transitions": [
            {"from": "draft", "to": "approval", "trigger": "submit"},
            {"from": "approval", "to": "done", "trigger": "approve"},
            {"from": "approval", "to": "draft", "trigger": "reject", "instructions": "redo"},
        ],
    }


async def _at_approval(tracker: Tracker) -> str:
    pid = await make_pipeline(tracker, approval_pipeline())
    tid = await tracker.create_task(new_task(pid, "essay"))
    await tracker.transition(await claim(tracker, "writer"), "submit")
    return tid


async def test_a_human_moves_the_task_and_the_next_run_reads_the_instructions(
    tracker: Tracker,
) -> None:
    tid = await _at_approval(tracker)
    assert await tracker.claim("w", "writer", 60_000) is None  # nobody claims a human step
    result = await tracker.transition_task(
        tid, "reject", expected_stage="approval", instructions="shorter, please"
    )
    assert (result.previous_stage, result.new_stage, result.trigger) == (
        "approval",
        "draft",
        "reject",
    )
    lease = await claim(tracker, "writer")
    assert (lease.task.id, lease.task.stage, lease.task.task_version) == (tid, "draft", 3)
    moves = [e for e in await task_events(tracker, tid) if e.kind == "transition"]
    assert moves[-1].run_id is None
    assert moves[-1].data == {
        "trigger": "reject",
        "from": "approval",
        "to": "draft",
        "instructions": "shorter, please",
        "by": "human",
    }
    await tracker.transition(lease, "submit")
    await tracker.transition_task(
        tid, "approve", expected_stage="approval", expected_task_version=4
    )
    assert (await tracker.get_task(tid)).stage == "done"


async def _unchanged(tracker: Tracker, tid: str, call: Any, exc: Any) -> Any:
    before = await tracker.get_task(tid)
    events = len(await task_events(tracker, tid))
    with pytest.raises(exc) as err:
        await call
    after = await tracker.get_task(tid)
    assert (after.stage, after.task_version) == (before.stage, before.task_version)
    assert len(await task_events(tracker, tid)) == events
    return err.value


async def test_a_stale_expected_stage_is_refused_naming_both(tracker: Tracker) -> None:
    tid = await _at_approval(tracker)
    err = await _unchanged(
        tracker, tid, tracker.transition_task(tid, "approve", expected_stage="draft"), Conflict
    )
    assert err.code == "expected_stage_mismatch"
    assert "'approval'" in str(err) and "'draft'" in str(err)
    err = await _unchanged(
        tracker,
        tid,
        tracker.transition_task(tid, "approve", expected_stage="approval", expected_task_version=1),
        Conflict,
    )
    assert err.code == "task_version_mismatch"


async def test_a_trigger_not_allowed_lists_the_allowed_ones(tracker: Tracker) -> None:
    tid = await _at_approval(tracker)
    err = await _unchanged(
        tracker,
        tid,
        tracker.transition_task(tid, "ship", expected_stage="approval"),
        InvalidTransition,
    )
    assert sorted(err.allowed) == ["approve", "reject"]


async def test_only_a_task_waiting_at_a_human_step_moves_by_hand(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, approval_pipeline())
    tid = await tracker.create_task(new_task(pid, "essay"))
    err = await _unchanged(
        tracker, tid, tracker.transition_task(tid, "submit", expected_stage="draft"), Conflict
    )
    assert err.code == "not_a_human_step" and "agent_role 'writer'" in str(err)
    lease = await claim(tracker, "writer")
    await tracker.transition(lease, "submit")
    await tracker.transition_task(tid, "approve", expected_stage="approval")
    err = await _unchanged(
        tracker, tid, tracker.transition_task(tid, "approve", expected_stage="done"), Conflict
    )
    assert err.code == "not_a_human_step" and "terminal" in str(err)
    with pytest.raises(NotFound, match=UNKNOWN):
        await tracker.transition_task(UNKNOWN, "approve", expected_stage="approval")


@pytest.mark.requires(BACKLOG_OPS)
async def test_a_dead_lettered_task_is_not_a_human_step(tracker: Tracker) -> None:
    tid = await _at_approval(tracker)
    await tracker.cancel(tid)
    err = await _unchanged(
        tracker, tid, tracker.transition_task(tid, "approve", expected_stage="approval"), Conflict
    )
    assert err.code == "not_a_human_step" and "requeue" in str(err)


@pytest.mark.requires(STRICT_DEFINITIONS)
@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"human": True, "agent_role": "writer"}, "human step"),
        ({"human": True, "terminal": True}, "human step"),
        ({"human": "yes"}, "'human' must be true or false"),
        ({}, "no agent_role"),
    ],
)
async def test_a_human_step_has_no_role_and_is_not_terminal(
    tracker: Tracker, state: dict[str, Any], message: str
) -> None:
    definition = approval_pipeline()
    definition["states"]["approval"] = state
    if state.get("terminal"):
        definition["transitions"] = definition["transitions"][:1]
    with pytest.raises(ValidationFailed, match=message):
        await make_pipeline(tracker, definition)
    assert await tracker.list_pipelines() == []
