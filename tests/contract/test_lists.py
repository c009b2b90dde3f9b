"""Lists and lookups: pagination never skips, limits and cursors are checked, unknown ids."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.contract.support import (
    CLOCK,
    RUN_DETAILS,
    FakeClock,
    claim,
    make_pipeline,
    new_task,
    review_pipeline,
)
from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.models import ArtifactCreate, RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio

UNKNOWN = "00000000-0000-4000-8000-00000000dead"


async def test_task_pages_never_skip_within_one_millisecond(tracker: Tracker) -> None:
    # NullTickets skipped one task per page boundary; random ids broke same-ms order.
    pid = await make_pipeline(tracker)
    created = [await tracker.create_task(new_task(pid, f"t{i}")) for i in range(7)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await tracker.list_tasks(limit=2, cursor=cursor)
        pages += 1
        seen.extend(t.id for t in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == created
    assert pages == 4


@pytest.mark.requires(CLOCK)
async def test_task_pages_never_skip_across_milliseconds(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    created = []
    for i in range(11):
        created.append(await tracker.create_task(new_task(pid, f"t{i}")))
        if i % 3 == 0:
            clock.advance(1)
    for limit in (1, 2, 3, 5, 11, 50):
        seen: list[str] = []
        cursor = None
        while True:
            page = await tracker.list_tasks(limit=limit, cursor=cursor)
            seen.extend(t.id for t in page.items)
            if page.next_cursor is None:
                break
            last = page.items[-1]
            # the documented cursor form, built from the last item, is what next_cursor is
            assert page.next_cursor == f"{last.created_at_ms}:{last.id}"
            cursor = page.next_cursor
        assert seen == created, limit


async def test_task_list_filters(tracker: Tracker) -> None:
    a = await make_pipeline(tracker, review_pipeline())
    b = await make_pipeline(tracker)
    a1, a2 = await tracker.create_tasks([new_task(a, "a1"), new_task(a, "a2")])
    b1 = await tracker.create_task(new_task(b, "b1"))
    await tracker.transition(await claim(tracker), "complete")  # a1 -> review
    assert [t.id for t in (await tracker.list_tasks(pipeline_id=a)).items] == [a1, a2]
    assert [t.id for t in (await tracker.list_tasks(stage="todo")).items] == [a2, b1]
    assert [t.id for t in (await tracker.list_tasks(stage="review")).items] == [a1]
    assert [t.id for t in (await tracker.list_tasks(stage="todo", pipeline_id=b)).items] == [b1]
    assert (await tracker.list_tasks(stage="nowhere")).items == []


async def test_listed_tasks_carry_their_latest_run_and_blockage(tracker: Tracker) -> None:
    # ``task list`` shows each task's state from the listing alone (extension list_state): it
    # read every open task whole before, one request each over HTTP.
    pid = await make_pipeline(tracker)
    up = await tracker.create_task(new_task(pid, "up"))
    running, failed = await tracker.create_tasks(
        [new_task(pid, "running", priority=9), new_task(pid, "failed", priority=8)]
    )
    blocked = await tracker.create_task(new_task(pid, "blocked", priority=9, dependencies=[up]))
    lease = await claim(tracker, agent="agent-7")
    assert lease.task.id == running
    await tracker.fail(await claim(tracker, agent="agent-8"), "boom")
    await claim(tracker, agent="agent-9")  # the retry of ``failed`` or ``up``: whichever first
    listed = {t.id: t.listed for t in (await tracker.list_tasks(pipeline_id=pid)).items}
    if "list_state" not in (await tracker.capabilities()).extensions:
        assert set(listed.values()) == {None}
        return
    detail = {i: await tracker.get_task(i) for i in (up, running, failed, blocked)}
    for task_id, state in listed.items():
        assert state is not None
        run = detail[task_id].latest_run
        brief = state.latest_run
        assert (brief is None) == (run is None), task_id
        if brief is not None and run is not None:
            assert (brief.status, brief.attempt, brief.agent_id) == (
                run.status,
                run.attempt,
                run.agent_id,
            )
        assert state.blocked == any(not d.resolved for d in detail[task_id].dependencies)
    assert listed[running] is not None and listed[running].latest_run is not None
    assert (listed[running].latest_run.status, listed[running].latest_run.agent_id) == (
        "running",
        "agent-7",
    )
    assert listed[blocked] is not None and listed[blocked].blocked
    assert listed[blocked].latest_run is None
    assert listed[up] is not None and not listed[up].blocked


async def test_event_pages_never_skip(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    ids = [await tracker.add_event(lease, "progress", {"i": i}) for i in range(5)]
    assert ids == sorted(ids)
    seen = []
    cursor = None
    while True:
        page = await tracker.list_events(lease.run.id, limit=2, cursor=cursor)
        seen.extend(page.items)
        if page.next_cursor is None:
            break
        assert page.next_cursor == str(page.items[-1].id)
        cursor = page.next_cursor
    assert [e.id for e in seen] == ids
    assert [e.data for e in seen] == [{"i": i} for i in range(5)]
    assert {e.run_id for e in seen} == {lease.run.id}
    assert (await tracker.list_events(UNKNOWN)).items == []


async def test_artifact_pages_never_skip(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid, other = await tracker.create_tasks([new_task(pid), new_task(pid)])
    lease = await claim(tracker)
    assert lease.task.id == tid
    ids = []
    for i in range(5):
        ids.append(
            await tracker.add_artifact(
                ArtifactCreate(
                    kind="file",
                    uri=f"file:///out/{i}",
                    task_id=tid,
                    run_id=lease.run.id,
                    sha256="ab" * 32,
                    size_bytes=i,
                    meta={"i": i},
                )
            )
        )
    await tracker.add_artifact(ArtifactCreate(kind="file", uri="file:///other", task_id=other))
    for filters in ({"task_id": tid}, {"run_id": lease.run.id}):
        seen = []
        cursor = None
        while True:
            page = await tracker.list_artifacts(limit=2, cursor=cursor, **filters)
            seen.extend(page.items)
            if page.next_cursor is None:
                break
            last = page.items[-1]
            assert page.next_cursor == f"{last.created_at_ms}:{last.id}"
            cursor = page.next_cursor
        assert [a.id for a in seen] == ids, filters
    first = seen[0]
    assert (first.kind, first.uri, first.task_id, first.run_id) == (
        "file",
        "file:///out/0",
        tid,
        lease.run.id,
    )
    assert (first.sha256, first.size_bytes, first.meta) == ("ab" * 32, 0, {"i": 0})
    assert len((await tracker.list_artifacts()).items) == 6


@pytest.mark.requires(RUN_DETAILS)
async def test_task_event_pages_never_skip(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(
        new_task(pid, retry_policy=RetryPolicy(retry_delay_ms=0))
    )  # retry at once
    first = await claim(tracker)
    ids = [await tracker.add_event(first, "progress", {"run": 1, "i": i}) for i in range(3)]
    await tracker.fail(first, "again")
    second = await claim(tracker)
    ids += [await tracker.add_event(second, "progress", {"run": 2, "i": i}) for i in range(3)]
    seen = []
    cursor = None
    while True:
        page = await tracker.list_task_events(tid, limit=2, cursor=cursor)
        seen.extend(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    progress = [e.id for e in seen if e.kind == "progress"]
    assert progress == ids
    assert [e.id for e in seen] == sorted(e.id for e in seen)
    assert "retry_scheduled" in [e.kind for e in seen]
    assert {e.run_id for e in seen} == {first.run.id, second.run.id}


@pytest.mark.requires(RUN_DETAILS)
async def test_task_events_filtered_by_kind(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(
        new_task(pid, retry_policy=RetryPolicy(retry_delay_ms=0))
    )  # retry at once
    first = await claim(tracker)
    await tracker.add_event(first, "progress", {"i": 1})
    await tracker.fail(first, "again")
    second = await claim(tracker)
    wanted = [await tracker.add_event(second, "note", {"i": i}) for i in range(3)]
    await tracker.add_event(second, "progress", {"i": 2})
    seen = []
    cursor = None
    while True:
        page = await tracker.list_task_events(tid, limit=2, cursor=cursor, kind="note")
        seen.extend(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert [e.id for e in seen] == wanted
    assert {e.kind for e in seen} == {"note"}
    assert (await tracker.list_task_events(tid, kind="nothing-like-this")).items == []
    with pytest.raises(ValidationFailed):
        await tracker.list_task_events(tid, kind="")


@pytest.mark.parametrize("limit", [0, -5, 1001])
async def test_limits_out_of_range_are_refused(tracker: Tracker, limit: int) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: tracker.list_tasks(limit=limit),
        lambda: tracker.list_events(lease.run.id, limit=limit),
        lambda: tracker.list_artifacts(limit=limit),
    ]
    for call in calls:
        with pytest.raises(ValidationFailed) as err:
            await call()
        assert err.value.code == "invalid_limit"
        assert "limit" in str(err.value)


async def test_limit_bounds_are_accepted(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    assert len((await tracker.list_tasks(limit=1)).items) == 1
    assert len((await tracker.list_tasks(limit=1000)).items) == 2


@pytest.mark.parametrize("cursor", ["garbage", "12", "abc:def", ":x"])
async def test_malformed_task_and_artifact_cursors_are_refused(
    tracker: Tracker, cursor: str
) -> None:
    with pytest.raises(ValidationFailed) as err:
        await tracker.list_tasks(cursor=cursor)
    assert err.value.code == "invalid_cursor"
    with pytest.raises(ValidationFailed) as err:
        await tracker.list_artifacts(cursor=cursor)
    assert err.value.code == "invalid_cursor"


@pytest.mark.parametrize("cursor", ["x", "1.5", "1:2"])
async def test_malformed_event_cursor_is_refused(tracker: Tracker, cursor: str) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    with pytest.raises(ValidationFailed) as err:
        await tracker.list_events(lease.run.id, cursor=cursor)
    assert err.value.code == "invalid_cursor"


async def test_unknown_ids_are_not_found(tracker: Tracker) -> None:
    with pytest.raises(NotFound):
        await tracker.get_task(UNKNOWN)
    with pytest.raises(NotFound):
        await tracker.get_pipeline(UNKNOWN)


async def test_artifact_with_unknown_task_or_run_is_not_found(tracker: Tracker) -> None:
    # NullTickets answers 500 (a foreign-key failure) here.
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    with pytest.raises(NotFound) as err:
        await tracker.add_artifact(ArtifactCreate(kind="log", uri="mem://1", task_id=UNKNOWN))
    assert UNKNOWN in str(err.value)
    with pytest.raises(NotFound) as err:
        await tracker.add_artifact(
            ArtifactCreate(kind="log", uri="mem://1", task_id=tid, run_id=UNKNOWN)
        )
    assert UNKNOWN in str(err.value)
    assert (await tracker.list_artifacts()).items == []


async def test_artifact_without_task_or_run(tracker: Tracker) -> None:
    aid = await tracker.add_artifact(ArtifactCreate(kind="report", uri="https://example.invalid"))
    (art,) = (await tracker.list_artifacts()).items
    assert (art.id, art.task_id, art.run_id) == (aid, None, None)


async def test_pipelines_are_listed_newest_first(tracker: Tracker, clock: FakeClock) -> None:
    first = await make_pipeline(tracker, name="first")
    clock.advance(1)
    second = await make_pipeline(tracker, review_pipeline(), name="second")
    listed = await tracker.list_pipelines()
    assert [p.id for p in listed] == [second, first]
    got = await tracker.get_pipeline(second)
    assert (got.name, got.definition) == ("second", review_pipeline())
