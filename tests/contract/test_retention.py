"""Retention (extension ``purge``): finished tasks older than an age go, with what hangs off them.

On every rail of the suite (embedded, served over ASGI and over 127.0.0.1): what is purged and
what never is (waiting, running, recent, a finished task an unfinished one depends on), dry runs
that write nothing, bad ages refused with nothing written, maintenance's ``retention_days``. On
the embedded file: purging in batches while another instance drains the same file loses nothing
waiting or running, and the file's page count drops after purge + incremental vacuum. A plain
NullTickets server has no such operation: ``Unsupported`` before anything is sent.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.contract.support import FakeClock, OpenTracker, claim, make_pipeline, new_task
from tests.remote.fake_nulltickets import FakeNullTickets
from tracker_client.embedded.tracker import EmbeddedTracker
from tracker_client.errors import ConfigError, NotFound, Unsupported, ValidationFailed
from tracker_client.models import ArtifactCreate
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.ops_models import PurgeResult
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

DAY_MS = 86_400_000


async def _finish(tracker: Tracker, events: int = 1) -> str:
    """Claim the next task, log ``events`` events and an artifact, complete it; its id."""
    lease = await claim(tracker)
    for n in range(events):
        await tracker.add_event(lease, "progress", {"n": n})
    await tracker.add_artifact(
        ArtifactCreate(kind="log", uri="file:///tmp/x", task_id=lease.task.id, run_id=lease.run_id)
    )
    await tracker.transition(lease, "complete")
    return lease.task.id


async def _exists(tracker: Tracker, task_id: str) -> bool:
    try:
        await tracker.get_task(task_id)
    except NotFound:
        return False
    return True


async def _purge(tracker: Tracker, **arguments: Any) -> PurgeResult:
    result = await tracker.call("purge", **arguments)
    assert isinstance(result, PurgeResult)
    return result


async def test_purge_takes_old_finished_tasks_and_keeps_open_work(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid, "done", priority=9))
    done = await _finish(tracker, events=3)
    failed_id = await tracker.create_task(new_task(pid, "dead", priority=8))
    lease = await claim(tracker)
    assert lease.task.id == failed_id
    await tracker.fail(lease, "boom", retryable=False)
    cancelled = await tracker.create_task(new_task(pid, "cancelled"))
    await tracker.cancel(cancelled)
    blocker = await tracker.create_task(new_task(pid, "blocker", priority=7))
    blocked = await tracker.create_task(new_task(pid, "blocked", dependencies=[blocker]))
    # Finished, with a dependent still waiting (a dead-lettered blocker would dead-letter it).
    await tracker.transition(await claim(tracker), "complete")
    waiting = await tracker.create_task(new_task(pid, "waiting", priority=-1))
    running = await tracker.create_task(new_task(pid, "running", priority=5))
    clock.advance(8 * DAY_MS)
    held = await claim(tracker)
    assert held.task.id == running
    await tracker.create_task(new_task(pid, "recent", priority=9))
    recent = await _finish(tracker)

    result = await _purge(tracker, older_than_ms=7 * DAY_MS)

    assert (result.tasks, result.runs, result.dry_run) == (3, 2, False)
    assert result.events >= 3 and result.artifacts == 1
    for gone in (done, failed_id, cancelled):
        assert not await _exists(tracker, gone)
    for kept in (blocker, blocked, waiting, running, recent):
        assert await _exists(tracker, kept)
    await tracker.heartbeat(held)  # the running task's lease is untouched
    assert await tracker.call("count_tasks") == 5


async def test_purge_is_limited_to_one_pipeline(tracker: Tracker, clock: FakeClock) -> None:
    first, second = await make_pipeline(tracker), await make_pipeline(tracker)
    await tracker.create_tasks([new_task(first, "a", priority=1), new_task(second, "b")])
    a, b = await _finish(tracker), await _finish(tracker)
    clock.advance(2 * DAY_MS)
    result = await _purge(tracker, older_than_ms=DAY_MS, pipeline_id=second)
    assert result.tasks == 1
    assert await _exists(tracker, a) and not await _exists(tracker, b)


async def test_a_dry_run_counts_and_writes_nothing(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, f"t{n}") for n in range(3)])
    ids = [await _finish(tracker, events=2) for _ in range(3)]
    clock.advance(2 * DAY_MS)
    dry = await _purge(tracker, older_than_ms=DAY_MS, dry_run=True)
    assert (dry.tasks, dry.runs, dry.artifacts, dry.dry_run) == (3, 3, 3, True)
    assert dry.events >= 6 and dry.pages_freed == 0
    for task_id in ids:
        assert len((await tracker.list_task_events(task_id)).items) >= 2
    real = await _purge(tracker, older_than_ms=DAY_MS)
    assert (real.tasks, real.runs, real.events, real.artifacts) == (
        dry.tasks,
        dry.runs,
        dry.events,
        dry.artifacts,
    )


@pytest.mark.parametrize("age", [-1, 0, 100 * 366 * DAY_MS + 1, "7d", True])
async def test_a_bad_age_is_refused_and_nothing_is_written(
    tracker: Tracker, clock: FakeClock, age: object
) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    done = await _finish(tracker)
    clock.advance(2 * DAY_MS)
    # Over the wire a non-integer is refused by the body model before sending.
    with pytest.raises((ValidationFailed, ValueError)) as info:
        await tracker.call("purge", older_than_ms=age)
    assert "older_than_ms" in str(info.value)
    assert await _exists(tracker, done)


async def test_maintenance_purges_past_retention_days(
    open_tracker: OpenTracker, clock: FakeClock
) -> None:
    tracker = await open_tracker(retention_days="2")
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, "old"), new_task(pid, "open")])
    old = await _finish(tracker)
    clock.advance(DAY_MS)
    assert (await tracker.maintenance()).purged_tasks == 0
    clock.advance(2 * DAY_MS)
    report = await tracker.maintenance()
    assert report.purged_tasks == 1
    assert not await _exists(tracker, old)
    assert await tracker.call("count_tasks") == 1


async def test_retention_days_zero_keeps_finished_tasks_forever(
    open_tracker: OpenTracker, clock: FakeClock
) -> None:
    tracker = await open_tracker(retention_days=0)
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    done = await _finish(tracker)
    clock.advance(3650 * DAY_MS)
    assert (await tracker.maintenance()).purged_tasks == 0
    assert await _exists(tracker, done)


@pytest.mark.parametrize("value", [-1, "soon", 36_601, 1.5])
async def test_a_bad_retention_days_option_is_named(tmp_path: Path, value: object) -> None:
    path = tmp_path / "rail.db"
    with pytest.raises(ConfigError, match="retention_days"):
        await EmbeddedTracker.open(str(path), retention_days=value)
    assert not path.exists()


def _pages(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_count").fetchone()[0])
    finally:
        conn.close()


async def test_the_file_shrinks_after_purge_and_incremental_vacuum(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "rail.db"
    async with await EmbeddedTracker.open(str(path), clock=clock) as tracker:
        pid = await make_pipeline(tracker)
        blob = {"text": "x" * 4000}
        await tracker.create_tasks([new_task(pid, f"t{n}", metadata=blob) for n in range(300)])
        while (lease := await tracker.claim("a", "coder", 60_000)) is not None:
            await tracker.add_event(lease, "progress", blob)
            await tracker.transition(lease, "complete")
        before = _pages(path)
        clock.advance(2 * DAY_MS)
        result = await tracker.purge(older_than_ms=DAY_MS)
        assert result.tasks == 300 and result.pages_freed > 0
        after = _pages(path)
    assert after < before / 4, (before, after)


async def test_purge_during_a_drain_loses_nothing_waiting_or_running(tmp_path: Path) -> None:
    """Two instances on one file: one drains (claims, holds some leases, completes), the other
    purges the old finished tasks in batches at the same time."""
    clock = FakeClock()
    path = str(tmp_path / "rail.db")
    async with (
        await EmbeddedTracker.open(path, clock=clock) as drainer,
        await EmbeddedTracker.open(path, clock=clock) as purger,
    ):
        pid = await make_pipeline(drainer)
        old = await drainer.create_tasks([new_task(pid, f"old{n}") for n in range(400)])
        while (lease := await drainer.claim("a", "coder", 60_000)) is not None:
            await drainer.add_event(lease, "progress", {"n": 1})
            await drainer.transition(lease, "complete")
        open_ids = await drainer.create_tasks([new_task(pid, f"open{n}") for n in range(200)])
        clock.advance(10 * DAY_MS)  # the open tasks are old too: only being unfinished saves them
        held: list[str] = []
        completed: list[str] = []

        async def drain() -> None:
            while (lease := await drainer.claim("a", "coder", DAY_MS)) is not None:
                if len(held) < 20:
                    held.append(lease.task.id)  # stays running
                    continue
                await drainer.transition(lease, "complete")
                completed.append(lease.task.id)
                await anyio.lowlevel.checkpoint()

        results: list[PurgeResult] = []

        async def purge() -> None:
            results.append(await purger.purge(older_than_ms=DAY_MS))

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            tg.start_soon(purge)
        assert results[0].tasks == 400
        assert len(held) + len(completed) == 200
        for task_id in open_ids:
            detail = await drainer.get_task(task_id)
            assert detail.stage == ("todo" if task_id in held else "done")
        assert not any([await _exists(drainer, t) for t in old[:5]])
        assert await drainer.call("count_tasks") == 200


@pytest.fixture
async def plain() -> AsyncIterator[RemoteTracker]:
    fake = FakeNullTickets(api_token="admin")
    tracker = RemoteTracker("http://127.0.0.1:7700", api_token="admin", transport=fake.transport())
    try:
        yield tracker
    finally:
        await tracker.aclose()


async def test_purge_is_unsupported_on_a_plain_nulltickets_server(plain: RemoteTracker) -> None:
    with pytest.raises(Unsupported, match="purge"):
        await plain.call("purge", older_than_ms=DAY_MS)
