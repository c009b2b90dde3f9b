"""``follow_task`` (extension ``follow``): a task's events after a cursor, as soon as one is
written or the task ends, on every tracker of the suite that lists the extension.

The answer holds the events after ``after`` (oldest first), ``next_cursor`` to go on from and
``finished`` once the task is finished and no event is left; a waiting follower is woken by an
event (a quiet write for the workers' waiters), by another instance's write on the same rail,
and by the task's end (completed, dead-lettered, cancelled). Bad input is refused naming it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup, TaskStatus

from tests.contract.support import (
    BACKLOG_OPS,
    MULTI_INSTANCE,
    OpenTracker,
    claim,
    make_pipeline,
    new_task,
)
from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.ops_models import TaskFollow
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.requires("follow")]

#: Long enough that an answer with events came from a wake-up, short enough for the remote
#: client's read timeout (10 s).
LONG_MS = 8_000


async def _follow(tracker: Tracker, task_id: str, **kw: Any) -> TaskFollow:
    answer: TaskFollow = await tracker.call("follow_task", task_id, **kw)
    return answer


@pytest.fixture
async def follower(open_tracker: OpenTracker) -> Tracker:
    """The rail's tracker (the ``follow`` extension is required by the module's mark)."""
    return await open_tracker()


def _waiting(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is suspended on a future that is not done (asyncio's own record)."""
    waiter = getattr(task, "_fut_waiter", None)
    return waiter is not None and not waiter.done()


async def _until_waiting(root: int) -> None:
    """Return once the task ``root`` and every task it started (transitively) are waiting.

    The follower is then registered with its tracker: ``follow_task`` counts itself a
    follower and takes the wake-up event before its first await that waits (the read on the
    database thread, in process; through the ASGI transport the served app runs inside the
    follower's task, so its tasks are in this tree). Only the follower's tree is looked at,
    every turn of the loop: ``anyio.wait_all_tasks_blocked`` wants *every* task of the loop
    waiting at one look, looking every 0.1 s, and in CI's full run it once never returned
    within the test's 7 s (the traceback: cancelled in its ``sleep(0.1)``), so nothing was
    written and the follow was never answered. Over TCP the server's side is not in the tree:
    a write may then come before the follow reaches the server, which answers it at once.
    """
    while True:
        await anyio.lowlevel.checkpoint()
        parents = {t.id: t.parent_id for t in anyio.get_running_tasks()}
        tree = {root}
        while grown := {i for i, p in parents.items() if p in tree} - tree:
            tree |= grown
        tasks = {id(t): t for t in asyncio.all_tasks() if id(t) in tree}
        if root not in tasks or all(_waiting(t) for t in tasks.values()):
            return  # waiting, or already answered


async def _follow_in_background(
    tg: TaskGroup, tracker: Tracker, task_id: str, after: str
) -> list[TaskFollow]:
    """Start a follower of ``task_id`` after ``after``; return (its answer's list) once it waits."""
    got: list[TaskFollow] = []

    async def follow(*, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started(anyio.get_current_task().id)
        got.append(await _follow(tracker, task_id, after=after, timeout_ms=LONG_MS))

    await _until_waiting(await tg.start(follow))
    return got


async def test_follow_answers_events_after_the_cursor_then_the_end(follower: Tracker) -> None:
    pid = await make_pipeline(follower)
    tid = await follower.create_task(new_task(pid))
    idle = await _follow(follower, tid, timeout_ms=0)
    assert (idle.events, idle.next_cursor, idle.finished) == ([], "0", False)
    assert (idle.outcome, idle.stage) == ("pending", "todo")
    lease = await claim(follower)
    first = await follower.add_event(lease, "progress", {"step": 1})
    second = await follower.add_event(lease, "progress", {"step": 2})
    both = await _follow(follower, tid, after="0", timeout_ms=0)
    assert [(e.id, e.data) for e in both.events] == [(first, {"step": 1}), (second, {"step": 2})]
    assert (both.next_cursor, both.finished) == (str(second), False)
    assert (await _follow(follower, tid, after=both.next_cursor, timeout_ms=0)).events == []
    await follower.transition(lease, "complete")
    end = await _follow(follower, tid, after=both.next_cursor, timeout_ms=LONG_MS)
    assert [e.kind for e in end.events] == ["transition"]
    assert (end.finished, end.outcome, end.stage) == (True, "done", "done")
    again = await _follow(follower, tid, after=end.next_cursor, timeout_ms=LONG_MS)  # at once
    assert (again.events, again.finished, again.next_cursor) == ([], True, end.next_cursor)


async def test_a_page_short_of_the_end_is_not_finished(follower: Tracker) -> None:
    pid = await make_pipeline(follower)
    tid = await follower.create_task(new_task(pid))
    lease = await claim(follower)
    for step in range(3):
        await follower.add_event(lease, "progress", {"step": step})
    await follower.transition(lease, "complete")
    page = await _follow(follower, tid, limit=2, timeout_ms=0)
    assert (len(page.events), page.finished, page.outcome) == (2, False, "done")
    rest = await _follow(follower, tid, after=page.next_cursor, limit=2, timeout_ms=0)
    assert ([e.kind for e in rest.events], rest.finished) == (["progress", "transition"], True)


async def test_a_waiting_follower_is_woken_by_an_event_and_by_the_end(follower: Tracker) -> None:
    pid = await make_pipeline(follower)
    tid = await follower.create_task(new_task(pid))
    lease = await claim(follower)
    with anyio.fail_after(LONG_MS / 1000 - 1):  # a wake-up, not the long poll's timeout
        async with anyio.create_task_group() as tg:
            got = await _follow_in_background(tg, follower, tid, "0")
            await follower.add_event(lease, "progress", {"step": 1})
        assert [e.kind for e in got[0].events] == ["progress"]
        async with anyio.create_task_group() as tg:
            ended = await _follow_in_background(tg, follower, tid, got[0].next_cursor)
            await follower.fail(lease, "broken", retryable=False)
    assert (ended[0].finished, ended[0].outcome) == (True, "dead_lettered")
    assert [e.kind for e in ended[0].events] == ["dead_letter"]


async def test_a_follower_is_woken_while_another_task_keeps_the_loop_busy(
    follower: Tracker,
) -> None:
    """A task of the same loop that never waits (one that yields every turn: a busy client)
    neither keeps the follower from being woken nor this suite from seeing it wait (anyio's
    ``wait_all_tasks_blocked`` would wait for that task for ever)."""
    pid = await make_pipeline(follower)
    tid = await follower.create_task(new_task(pid))
    lease = await claim(follower)

    async def busy() -> None:
        while True:
            await anyio.lowlevel.checkpoint()

    with anyio.fail_after(LONG_MS / 1000 - 1):
        async with anyio.create_task_group() as outer:
            outer.start_soon(busy)
            async with anyio.create_task_group() as tg:
                got = await _follow_in_background(tg, follower, tid, "0")
                await follower.add_event(lease, "progress", {"step": 1})
            outer.cancel_scope.cancel()
    assert [e.kind for e in got[0].events] == ["progress"]


@pytest.mark.requires(BACKLOG_OPS)
async def test_cancelling_a_running_task_ends_its_follow(follower: Tracker) -> None:
    pid = await make_pipeline(follower)
    tid = await follower.create_task(new_task(pid))
    await claim(follower)
    with anyio.fail_after(LONG_MS / 1000 - 1):
        async with anyio.create_task_group() as tg:
            got = await _follow_in_background(tg, follower, tid, "0")
            await follower.cancel(tid, reason="cancelled")
    assert (got[0].finished, got[0].outcome) == (True, "cancelled")


@pytest.mark.requires(MULTI_INSTANCE)
async def test_a_follower_is_woken_by_another_instance_on_the_rail(
    open_tracker: OpenTracker, follower: Tracker
) -> None:
    writer = await open_tracker()
    pid = await make_pipeline(writer)
    tid = await writer.create_task(new_task(pid))
    lease = await claim(writer)
    with anyio.fail_after(LONG_MS / 1000 - 1):
        async with anyio.create_task_group() as tg:
            got = await _follow_in_background(tg, follower, tid, "0")
            await writer.add_event(lease, "progress", {"from": "the other instance"})
    assert [e.data for e in got[0].events] == [{"from": "the other instance"}]


async def test_follow_refuses_bad_input_naming_it(follower: Tracker) -> None:
    pid = await make_pipeline(follower)
    tid = await follower.create_task(new_task(pid))
    with pytest.raises(NotFound, match="no-such-task"):
        await _follow(follower, "no-such-task", timeout_ms=0)
    with pytest.raises(ValidationFailed, match="cursor"):
        await _follow(follower, tid, after="yesterday", timeout_ms=0)
    with pytest.raises(ValidationFailed, match="timeout_ms"):
        await _follow(follower, tid, timeout_ms=60_001)
    with pytest.raises(ValidationFailed, match="timeout_ms"):
        await _follow(follower, tid, timeout_ms=-1)
    with pytest.raises(ValidationFailed, match="limit"):
        await _follow(follower, tid, limit=0, timeout_ms=0)
    assert (await follower.list_task_events(tid)).items == []  # nothing written
