"""``requeue_all`` (extension ``requeue_all``, ``POST /ops/requeue-all``): bulk replay of dead
letters, on every tracker of the suite (embedded, served in process, served over TCP).

Each requeued task is requeued as ``requeue`` would (same stage rules, attempt reset, event); a
dry run only counts; the work is done in bounded batches; bad input is refused naming the field,
with nothing written. On a plain NullTickets server the operation is ``Unsupported``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract.support import (
    BACKLOG_OPS,
    CLOCK,
    EXTENSIONS,
    RUN_DETAILS,
    FakeClock,
    claim,
    make_pipeline,
    new_task,
    only,
    review_pipeline,
    task_events,
)
from tracker_client.errors import NotFound, Unsupported, ValidationFailed
from tracker_client.models import RetryPolicy
from tracker_client.ops_models import RequeueAllResult
from tracker_client.protocol import Tracker
from tracker_client.rules import backlog

pytestmark = [pytest.mark.anyio, pytest.mark.requires(BACKLOG_OPS), pytest.mark.timeout(60)]

HOUR_MS = 3_600_000


async def _dead(tracker: Tracker, pid: str, how: str, role: str = "coder") -> str:
    """A task of ``pid`` dead-lettered ``how``: ``cancelled`` or ``permanent_failure``."""
    policy = RetryPolicy(max_attempts=1)
    tid = await tracker.create_task(new_task(pid, how, retry_policy=policy))
    if how == "cancelled":
        await tracker.cancel(tid)
    else:
        lease = await claim(tracker, role)
        assert lease.task.id == tid
        await tracker.fail(lease, "boom", retryable=False)
    assert (await tracker.get_task(tid)).dead_letter_reason == how
    return tid


async def _reasons(tracker: Tracker, ids: list[str]) -> list[str | None]:
    return [(await tracker.get_task(tid)).dead_letter_reason for tid in ids]


@pytest.mark.requires(EXTENSIONS, RUN_DETAILS)
async def test_requeue_all_dead_letters_of_a_pipeline(tracker: Tracker) -> None:
    pid, other = await make_pipeline(tracker), await make_pipeline(tracker)
    failed = [await _dead(tracker, pid, "permanent_failure") for _ in range(2)]
    cancelled = await _dead(tracker, pid, "cancelled")
    elsewhere = await _dead(tracker, other, "cancelled")
    waiting = await tracker.create_task(new_task(pid, "still waiting"))

    dry = await tracker.call("requeue_all", pipeline_id=pid, dry_run=True)
    assert isinstance(dry, RequeueAllResult)
    assert (dry.requeued, dry.dry_run, dry.batches) == (3, True, 0)
    assert dry.by_reason == {"cancelled": 1, "permanent_failure": 2}
    assert await _reasons(tracker, [*failed, cancelled]) == [
        "permanent_failure",
        "permanent_failure",
        "cancelled",
    ]  # a dry run writes nothing

    done = await tracker.call("requeue_all", pipeline_id=pid)
    assert (done.pipeline_id, done.requeued, done.dry_run) == (pid, 3, False)
    assert done.by_reason == dry.by_reason
    assert await _reasons(tracker, [*failed, cancelled]) == [None, None, None]
    assert (await tracker.get_task(elsewhere)).dead_letter_reason == "cancelled"
    task = await tracker.get_task(failed[0])
    assert (task.stage, task.next_eligible_at_ms, task.task_version) == ("todo", 0, 2)
    event = only(await task_events(tracker, failed[0]), "requeued")
    assert event.data == {
        "previous_reason": "permanent_failure",
        "from_stage": "todo",
        "stage": "todo",
        "reset_attempts": True,
    }
    claimed = {(await claim(tracker)).task.id for _ in range(4)}
    assert claimed == {*failed, cancelled, waiting}

    # Idempotent: the same call again finds nothing left to requeue.
    again = await tracker.call("requeue_all", pipeline_id=pid)
    assert (again.requeued, again.by_reason) == (0, {})


async def _exhausted(tracker: Tracker, pid: str) -> str:
    """A task of ``pid`` dead-lettered after two failed runs (``max_attempts_exceeded``)."""
    policy = RetryPolicy(max_attempts=2, retry_delay_ms=0)
    tid = await tracker.create_task(new_task(pid, "exhausted", retry_policy=policy))
    for _ in range(2):
        await tracker.fail(await claim(tracker), "boom")
    assert (await tracker.get_task(tid)).dead_letter_reason == "max_attempts_exceeded"
    return tid


@pytest.mark.requires(EXTENSIONS)
async def test_requeue_all_filters_by_reason_and_keeps_attempts(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    exhausted = await _exhausted(tracker, pid)
    cancelled = await _dead(tracker, pid, "cancelled")
    done = await tracker.call(
        "requeue_all", pipeline_id=pid, reason="max_attempts_exceeded", reset_attempts=False
    )
    assert (done.requeued, done.by_reason) == (1, {"max_attempts_exceeded": 1})
    assert await _reasons(tracker, [exhausted, cancelled]) == [None, "cancelled"]
    await tracker.fail(await claim(tracker), "third")  # the failure count was kept: 3 >= 2
    assert await _reasons(tracker, [exhausted]) == ["max_attempts_exceeded"]
    await tracker.call("requeue_all", pipeline_id=pid, reason="max_attempts_exceeded")
    await tracker.fail(await claim(tracker), "first of a new budget")
    assert await _reasons(tracker, [exhausted]) == [None]
    none = await tracker.call("requeue_all", pipeline_id=pid, reason="no_such_reason")
    assert none.requeued == 0


async def test_requeue_all_into_a_named_stage(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    ids = [await _dead(tracker, pid, "cancelled") for _ in range(2)]
    done = await tracker.call("requeue_all", pipeline_id=pid, stage="review")
    assert done.requeued == 2
    assert [(await tracker.get_task(t)).stage for t in ids] == ["review", "review"]
    assert (await claim(tracker, "reviewer")).task.id in ids


@pytest.mark.requires(CLOCK)
async def test_requeue_all_since_takes_recent_dead_letters_only(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    old = await _dead(tracker, pid, "cancelled")
    clock.advance(2 * HOUR_MS)
    recent = await _dead(tracker, pid, "cancelled")
    clock.advance(60_000)
    dry = await tracker.call("requeue_all", pipeline_id=pid, since_ms=HOUR_MS, dry_run=True)
    assert dry.requeued == 1
    done = await tracker.call("requeue_all", pipeline_id=pid, since_ms=HOUR_MS)
    assert done.requeued == 1
    assert await _reasons(tracker, [old, recent]) == ["cancelled", None]


async def test_requeue_all_works_in_bounded_batches(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backlog, "REQUEUE_BATCH", 2)  # every tracker here serves in process
    pid = await make_pipeline(tracker)
    ids = await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(7)])
    assert await tracker.cancel_all(pipeline_id=pid) == 7
    done = await tracker.call("requeue_all", pipeline_id=pid)
    assert (done.requeued, done.batches) == (7, 4)  # 2 + 2 + 2 + 1, one transaction each
    assert await _reasons(tracker, ids) == [None] * 7


async def _refused(tracker: Tracker, ids: list[str], error: type[Exception], **call: object) -> str:
    with pytest.raises(error) as info:
        await tracker.call("requeue_all", **call)
    assert await _reasons(tracker, ids) == ["cancelled"] * len(ids)  # nothing written
    return str(info.value)


async def test_requeue_all_bad_input_is_refused_and_writes_nothing(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    ids = [await _dead(tracker, pid, "cancelled") for _ in range(2)]
    unknown = "00000000-0000-4000-8000-00000000dead"
    assert unknown in await _refused(tracker, ids, NotFound, pipeline_id=unknown)
    message = await _refused(tracker, ids, ValidationFailed, pipeline_id=pid, stage="limbo")
    assert "limbo" in message
    message = await _refused(tracker, ids, ValidationFailed, pipeline_id=pid, stage="done")
    assert "terminal" in message and "done" in message
    for bad in (0, -5):
        message = await _refused(tracker, ids, ValidationFailed, pipeline_id=pid, since_ms=bad)
        assert "since_ms" in message
    message = await _refused(tracker, ids, ValidationFailed, pipeline_id=pid, reason="")
    assert "reason" in message
    message = await _refused(
        tracker, ids, ValidationFailed, pipeline_id=pid, stage="limbo", dry_run=True
    )
    assert "limbo" in message


async def test_requeue_all_is_unsupported_on_a_plain_nulltickets_server() -> None:
    from tests.remote.fake_nulltickets import FakeNullTickets
    from tracker_client.nulltickets.client import RemoteTracker

    fake = FakeNullTickets()
    remote = RemoteTracker("http://127.0.0.1:7700", transport=fake.transport())
    try:
        with pytest.raises(Unsupported) as info:
            await remote.call("requeue_all", pipeline_id="p", dry_run=True)
    finally:
        await remote.aclose()
    assert str(info.value).startswith("requeue_all is not supported")
    assert [r.url.path for r in fake.requests] == ["/health"]  # nothing else was sent


async def test_the_served_route_refuses_a_bad_body_naming_the_field(tmp_path: Path) -> None:
    import httpx

    from tracker_client.embedded import EmbeddedTracker
    from tracker_client.serve.app import create_app

    embedded = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        pid = await make_pipeline(embedded)
        ids = [await _dead(embedded, pid, "cancelled") for _ in range(2)]
        transport = httpx.ASGITransport(app=create_app(embedded))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            assert "requeue_all" in (await http.get("/health")).json()["extensions"]
            for body, field in [
                ({}, "pipeline_id"),
                ({"pipeline_id": pid, "since_ms": "3600000"}, "since_ms"),
                ({"pipeline_id": pid, "dry_run": "yes"}, "dry_run"),
                ({"pipeline_id": pid, "reset_attempts": 1}, "reset_attempts"),
                ({"pipeline_id": pid, "since_ms": -1}, "since_ms"),
            ]:
                answer = await http.post("/ops/requeue-all", json=body)
                assert answer.status_code == 400, (body, answer.text)
                assert field in answer.json()["error"]["message"], answer.text
            assert await _reasons(embedded, ids) == ["cancelled", "cancelled"]
            answer = await http.post("/ops/requeue-all", json={"pipeline_id": pid})
            assert answer.status_code == 200 and answer.json()["requeued"] == 2
    finally:
        await embedded.aclose()
