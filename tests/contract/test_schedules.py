"""Schedules (extension ``schedules``): periodic tasks stored in the rail, on every tracker of the
suite (embedded, served in process, served over TCP).

Each tick fired by maintenance makes exactly one task carrying its scheduled time, however many
tracker instances run maintenance on the rail; missed ticks (a pass more than a minute late)
follow the schedule's policy (skip, or one catch-up task); pause/resume/remove; bad input is
refused naming the field, with nothing written.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.contract.support import (
    BACKLOG_OPS,
    CLOCK,
    MULTI_INSTANCE,
    FakeClock,
    OpenTracker,
    make_pipeline,
)
from tracker_client.errors import Conflict, NotFound, ValidationFailed
from tracker_client.models import Task
from tracker_client.protocol import Tracker
from tracker_client.rules.schedules import MISSED_AFTER_MS
from tracker_client.schedule_models import Schedule

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.requires(BACKLOG_OPS, CLOCK),
    pytest.mark.timeout(60),
]

HOUR_MS = 3_600_000


async def _add(tracker: Tracker, pid: str, name: str = "nightly", **more: Any) -> Schedule:
    if "schedule" in more:
        name = more.pop("schedule")
    fields: dict[str, Any] = {"schedule": name, "pipeline_id": pid, "cron": "0 * * * *"}
    fields.update(title="scheduled", metadata={"kind": "report"})
    fields.update(more)
    schedule: Schedule = await tracker.call("create_schedule", **fields)
    return schedule


async def _tasks(tracker: Tracker, pid: str) -> list[Task]:
    return list((await tracker.list_tasks(pipeline_id=pid, limit=1000)).items)


async def test_each_tick_makes_one_task_carrying_its_time(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    schedule = await _add(tracker, pid)
    first = schedule.next_tick_ms
    assert first > clock.now_ms and first % HOUR_MS == 0  # the top of the next hour, UTC
    assert (await tracker.maintenance()).scheduled_tasks == 0  # nothing due yet
    assert await _tasks(tracker, pid) == []
    for n in range(3):
        clock.now_ms = first + n * HOUR_MS + 5_000
        assert (await tracker.maintenance()).scheduled_tasks == 1
        assert (await tracker.maintenance()).scheduled_tasks == 0  # the tick is spent
    tasks = await _tasks(tracker, pid)
    assert [t.metadata["scheduled_at_ms"] for t in tasks] == [first + n * HOUR_MS for n in range(3)]
    meta = tasks[0].metadata
    assert meta["kind"] == "report" and meta["schedule"] == "nightly"
    assert datetime.fromisoformat(meta["scheduled_at"]).timestamp() * 1000 == first
    assert tasks[0].title == "scheduled"
    shown: Schedule = await tracker.call("get_schedule", "nightly")
    assert shown.tasks_created == 3 and shown.last_task_id == tasks[-1].id
    assert shown.next_tick_ms == first + 3 * HOUR_MS


async def test_a_late_pass_fires_every_tick_that_is_not_yet_missed(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    first = (await _add(tracker, pid, cron="*/10 * * * * *")).next_tick_ms  # every 10 s
    clock.now_ms = first + 30_000  # 4 ticks due, all within the minute
    assert (await tracker.maintenance()).scheduled_tasks == 4
    got = [t.metadata["scheduled_at_ms"] for t in await _tasks(tracker, pid)]
    assert got == [first + n * 10_000 for n in range(4)]


@pytest.mark.parametrize("policy", ["skip", "catch_up"])
async def test_missed_ticks_after_downtime_follow_the_policy(
    tracker: Tracker, clock: FakeClock, policy: str
) -> None:
    pid = await make_pipeline(tracker)
    first = (await _add(tracker, pid, missed=policy)).next_tick_ms
    clock.now_ms = first + 5 * HOUR_MS + 30 * 60_000  # down over 6 ticks, none on time
    report = await tracker.maintenance()
    tasks = await _tasks(tracker, pid)
    if policy == "skip":
        assert report.scheduled_tasks == 0 and tasks == []
    else:
        assert report.scheduled_tasks == 1 and len(tasks) == 1
        assert tasks[0].metadata["missed_ticks"] == 6
        assert tasks[0].metadata["scheduled_at_ms"] == first
    shown: Schedule = await tracker.call("get_schedule", "nightly")
    assert shown.next_tick_ms == first + 6 * HOUR_MS  # then on schedule
    clock.now_ms = first + 6 * HOUR_MS + 1_000
    assert (await tracker.maintenance()).scheduled_tasks == 1
    assert len(await _tasks(tracker, pid)) == (1 if policy == "skip" else 2)


async def test_a_tick_late_by_less_than_the_grace_is_not_missed(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    first = (await _add(tracker, pid)).next_tick_ms
    clock.now_ms = first + MISSED_AFTER_MS  # exactly at the edge: still on time
    assert (await tracker.maintenance()).scheduled_tasks == 1


@pytest.mark.requires(MULTI_INSTANCE)
async def test_two_instances_on_one_rail_fire_each_tick_once(
    open_tracker: OpenTracker, clock: FakeClock
) -> None:
    one, two = await open_tracker("rail"), await open_tracker("rail")
    pid = await make_pipeline(one)
    first = (await _add(one, pid, cron="* * * * * *")).next_tick_ms
    for n in range(20):
        clock.now_ms = first + n * 500
        await (one if n % 2 else two).maintenance()
        await (two if n % 2 else one).maintenance()
    got = sorted(t.metadata["scheduled_at_ms"] for t in await _tasks(one, pid))
    assert got == [first + n * 1000 for n in range(10)]


async def test_a_time_zone_is_the_crons_wall_clock(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    schedule = await _add(tracker, pid, cron="0 3 * * *", timezone="Europe/Paris")
    at = datetime.fromtimestamp(schedule.next_tick_ms / 1000, ZoneInfo("Europe/Paris"))
    assert (at.hour, at.minute) == (3, 0)
    clock.now_ms = schedule.next_tick_ms
    await tracker.maintenance()
    (task,) = await _tasks(tracker, pid)
    assert task.metadata["scheduled_at"] == at.isoformat()  # with the zone's offset


async def test_pause_resume_and_remove(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    first = (await _add(tracker, pid)).next_tick_ms
    assert (await tracker.call("pause_schedule", "nightly")).paused is True
    clock.now_ms = first + 10_000
    assert (await tracker.maintenance()).scheduled_tasks == 0  # paused: the tick passes
    resumed: Schedule = await tracker.call("resume_schedule", "nightly")
    assert not resumed.paused and resumed.next_tick_ms == first + HOUR_MS  # no catching up
    assert [s.name for s in await tracker.call("list_schedules")] == ["nightly"]
    removed: Schedule = await tracker.call("delete_schedule", "nightly")
    assert removed.name == "nightly"
    assert await tracker.call("list_schedules") == []
    with pytest.raises(NotFound, match="nightly"):
        await tracker.call("get_schedule", "nightly")
    with pytest.raises(NotFound, match="nightly"):
        await tracker.call("pause_schedule", "nightly")


async def test_replace_updates_and_keeps_the_tick_when_the_cron_is_the_same(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    first = await _add(tracker, pid)
    again = await _add(tracker, pid, title="renamed", replace=True)
    assert again.title == "renamed" and again.next_tick_ms == first.next_tick_ms
    moved = await _add(tracker, pid, cron="30 * * * *", replace=True)
    assert moved.next_tick_ms != first.next_tick_ms
    assert len(await tracker.call("list_schedules")) == 1


async def test_bad_input_is_refused_naming_the_field_and_writes_nothing(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    await _add(tracker, pid)
    unknown = "00000000-0000-4000-8000-00000000dead"
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"schedule": "b", "cron": "61 * * * *"}, ValidationFailed, "cron"),
        ({"schedule": "b", "cron": "every day"}, ValidationFailed, "cron"),
        ({"schedule": "b", "timezone": "Mars/Olympus"}, ValidationFailed, "timezone"),
        ({"schedule": "b", "pipeline_id": unknown}, NotFound, "pipeline_id"),
        ({"schedule": "nightly"}, Conflict, "schedule"),
    ]
    before = await tracker.call("list_schedules")
    for change, error, field in cases:
        with pytest.raises(error) as info:
            await _add(tracker, pid, **change)
        assert field in str(info.value), (change, str(info.value))
    assert await tracker.call("list_schedules") == before
    assert await _tasks(tracker, pid) == []


async def test_the_served_route_refuses_a_bad_body_naming_the_field(tmp_path: Path) -> None:
    import httpx

    from tracker_client.embedded import EmbeddedTracker
    from tracker_client.serve.app import create_app

    embedded = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        pid = await make_pipeline(embedded)
        good = {"schedule": "n", "pipeline_id": pid, "cron": "0 3 * * *", "title": "t"}
        transport = httpx.ASGITransport(app=create_app(embedded))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            assert "schedules" in (await http.get("/health")).json()["extensions"]
            changes: list[tuple[dict[str, Any], str]] = [
                ({"missed": "sometimes"}, "missed"),
                ({"replace": "yes"}, "replace"),
                ({"cron": "0 3 * *"}, "cron"),
                ({"timezone": "Nowhere/City"}, "timezone"),
                ({"title": ""}, "title"),
                ({"metadata": [1]}, "metadata"),
            ]
            for change, field in changes:
                answer = await http.post("/schedules", json={**good, **change})
                assert answer.status_code == 400, (change, answer.text)
                assert field in answer.json()["error"]["message"], answer.text
            assert (await http.get("/schedules")).json() == []
            answer = await http.post("/schedules", json=good)
            assert answer.status_code == 201 and answer.json()["name"] == "n"
            assert (await http.post("/schedules", json=good)).status_code == 409
            assert (await http.get("/schedules/n")).json()["cron"] == "0 3 * * *"
    finally:
        await embedded.aclose()


async def test_a_stored_schedule_whose_ticks_cannot_be_computed_is_paused_with_the_reason(
    tmp_path: Path, clock: FakeClock
) -> None:
    import sqlite3

    from tracker_client.embedded import EmbeddedTracker

    path = str(tmp_path / "rail.db")
    async with await EmbeddedTracker.open(path, clock=clock) as embedded:
        pid = await make_pipeline(embedded)
        first = (await _add(embedded, pid)).next_tick_ms
        await _add(embedded, pid, "healthy")
    with sqlite3.connect(path) as conn:  # as if a tzdata update had dropped the zone
        conn.execute("UPDATE schedules SET timezone = 'Gone/Zone' WHERE name = 'nightly'")
    clock.now_ms = first + 1_000
    async with await EmbeddedTracker.open(path, clock=clock) as embedded:
        assert (await embedded.maintenance()).scheduled_tasks == 1  # the healthy one fired
        broken = await embedded.get_schedule("nightly")
        assert broken.paused and broken.last_error is not None
        assert "Gone/Zone" in broken.last_error
