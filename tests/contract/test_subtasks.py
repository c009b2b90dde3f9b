"""Subtasks (extension ``subtasks``): ``parent_id`` at creation, on every answer, an unknown
parent refused naming it, and the cancel cascade to the unfinished descendants."""

from __future__ import annotations

import pytest

from tests.contract.support import (
    BACKLOG_OPS,
    all_tasks,
    claim,
    make_pipeline,
    new_task,
    simple_pipeline,
)
from tracker_client.errors import LeaseLost, NotFound
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.requires("subtasks")]

UNKNOWN = "00000000-0000-4000-8000-00000000feed"


async def test_a_child_names_its_parent_in_every_answer(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    parent = await tracker.create_task(new_task(pid, "parent"))
    child = await tracker.create_task(new_task(pid, "child", parent_id=parent, priority=5))
    (bulk,) = await tracker.create_tasks([new_task(pid, "bulk child", parent_id=parent)])

    assert (await tracker.get_task(parent)).parent_id is None
    assert (await tracker.get_task(child)).parent_id == parent
    listed = {t.id: t.parent_id for t in await all_tasks(tracker)}
    assert listed == {parent: None, child: parent, bulk: parent}
    lease = await claim(tracker)
    assert (lease.task.id, lease.task.parent_id) == (child, parent)


async def test_an_unknown_parent_is_refused_naming_it_and_nothing_is_written(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    ok = await tracker.create_task(new_task(pid, "ok"))
    with pytest.raises(NotFound, match=UNKNOWN) as err:
        await tracker.create_task(new_task(pid, "orphan", parent_id=UNKNOWN))
    assert err.value.code == "parent_not_found"
    with pytest.raises(NotFound, match=UNKNOWN):
        await tracker.create_tasks(
            [new_task(pid, "fine", parent_id=ok), new_task(pid, "orphan", parent_id=UNKNOWN)]
        )
    assert [t.id for t in await all_tasks(tracker)] == [ok]


@pytest.mark.requires(BACKLOG_OPS)
async def test_cancel_cascades_to_the_unfinished_descendants_in_one_write(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    other = await make_pipeline(tracker, simple_pipeline("builder"))
    parent = await tracker.create_task(new_task(pid, "parent", priority=-1))
    done = await tracker.create_task(new_task(pid, "done child", parent_id=parent, priority=9))
    running = await tracker.create_task(new_task(other, "running child", parent_id=parent))
    waiting = await tracker.create_task(new_task(pid, "waiting child", parent_id=parent))
    grandchild = await tracker.create_task(new_task(pid, "grandchild", parent_id=done))
    unrelated = await tracker.create_task(new_task(pid, "unrelated", priority=-5))
    await tracker.transition(await claim(tracker), "complete")  # the done child (priority 9)
    held = await claim(tracker, "builder")
    assert held.task.id == running

    result = await tracker.cancel(parent)
    assert (result.task_id, result.cancelled_descendants) == (parent, 3)
    state = {t.id: t.dead_letter_reason for t in await all_tasks(tracker)}
    assert state == {
        parent: "cancelled",
        done: None,  # finished: untouched
        running: "cancelled",
        waiting: "cancelled",
        grandchild: "cancelled",  # a descendant through a finished child
        unrelated: None,
    }
    assert (await tracker.get_task(done)).stage == "done"
    with pytest.raises(LeaseLost):
        await tracker.heartbeat(held)
    assert (await claim(tracker)).task.id == unrelated


@pytest.mark.requires(BACKLOG_OPS)
async def test_cancelling_a_child_leaves_its_parent_and_siblings(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    parent = await tracker.create_task(new_task(pid, "parent"))
    one = await tracker.create_task(new_task(pid, "one", parent_id=parent))
    two = await tracker.create_task(new_task(pid, "two", parent_id=parent))
    result = await tracker.cancel(one)
    assert result.cancelled_descendants == 0
    state = {t.id: t.dead_letter_reason for t in await all_tasks(tracker)}
    assert state == {parent: None, one: "cancelled", two: None}


@pytest.mark.requires(BACKLOG_OPS)
async def test_cancel_all_cascades_to_children_in_other_pipelines(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    other = await make_pipeline(tracker, simple_pipeline("builder"))
    parent = await tracker.create_task(new_task(pid, "parent"))
    child = await tracker.create_task(new_task(other, "child", parent_id=parent))
    outside = await tracker.create_task(new_task(other, "outside"))
    assert await tracker.cancel_all(pipeline_id=pid) == 1
    state = {t.id: t.dead_letter_reason for t in await all_tasks(tracker)}
    assert state == {parent: "cancelled", child: "cancelled", outside: None}
