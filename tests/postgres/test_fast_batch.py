"""The PostgreSQL rail's batched reports and its async lane, against a real server.

``finish_many``'s plain transitions go in one round trip (``bw_finish_many``, see
``tracker_client/postgres/tracker.py``) and write what the embedded path writes, keyed as a
``finish`` is; every other item is answered by the embedded path in its place. The hot path's
calls run on the event loop's own connections (``tracker_client/postgres/aio.py``): a dropped
connection there is ``TrackerUnavailable`` and the next call gets a fresh one, a cancelled call
still ends (its answer read), and several loops may use one tracker in turn.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import anyio
import anyio.lowlevel
import psycopg
import pytest

from tests.contract.support import claim, make_pipeline, new_task, simple_pipeline
from tests.postgres.server import PgServer, fresh_schema_url
from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.errors import Conflict, LeaseLost, TrackerUnavailable
from tracker_client.factory import open_tracker
from tracker_client.postgres import aio

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

_PLAIN = {
    "trigger": "complete",
    "expected_stage": None,
    "expected_task_version": None,
    "instructions": None,
    "usage": None,
}


def _url(**options: Any) -> str:
    return fresh_schema_url(f"batch-{uuid.uuid4()}", **options)


@pytest.fixture(autouse=True)
def _quiet(quiet_tracker_log: None) -> None:
    """Every test here counts the one-trip paths (see conftest's ``quiet_tracker_log``)."""


class _Sent:
    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> _Sent:
    """Counts the queries psycopg sends, on the pool and on the async lane."""
    counter = _Sent()
    real, real_async = psycopg.Cursor.execute, psycopg.AsyncCursor.execute

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter.count += 1
        return real(self, *args, **kwargs)

    async def counting_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter.count += 1
        return await real_async(self, *args, **kwargs)

    real_prepared = aio.prepared_call

    async def counting_prepared(*args: Any, **kwargs: Any) -> Any:
        counter.count += 1  # the lane's one-statement calls, on libpq itself
        return await real_prepared(*args, **kwargs)

    real_simple = aio.simple_query

    async def counting_simple(*args: Any, **kwargs: Any) -> Any:
        counter.count += 1  # the lane's gathered writes (a create's), on libpq itself
        return await real_simple(*args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counting_async)
    monkeypatch.setattr(aio, "prepared_call", counting_prepared)
    monkeypatch.setattr(aio, "simple_query", counting_simple)
    return counter


async def test_plain_transitions_of_a_batch_take_one_round_trip(
    pg_server: PgServer, sent: _Sent
) -> None:
    tracker: Any = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        ids = await tracker.create_tasks([new_task(pid, f"t{i}", priority=-i) for i in range(5)])
        leases = await tracker.call(
            "claim_many", agent_id="a", agent_role="coder", lease_ttl_ms=60_000, n=5
        )
        items = [
            FinishItem(lease=lease, transition=_PLAIN, idempotency_key=f"k{i}")
            for i, lease in enumerate(leases)
        ]
        before = sent.count
        out = await tracker.finish_many(items)
        assert sent.count - before == 1
        assert all(isinstance(o, FinishResult) for o in out)
        moves = [o.transition for o in out if isinstance(o, FinishResult)]
        assert [m.new_stage for m in moves if m is not None] == ["done"] * 5
        for task_id in ids:
            detail = await tracker.get_task(task_id)
            assert (detail.stage, detail.task_version) == ("done", 2)
            assert detail.latest_run is not None and detail.latest_run.status == "completed"
            events = (await tracker.list_task_events(task_id, kind="transition")).items
            assert [e.data for e in events] == [
                {"trigger": "complete", "from": "todo", "to": "done", "instructions": ""}
            ]
        # A replay under the keys answers the recorded answers, writing nothing more; a plain
        # finish under one of the keys is the same finish (its record is a finish's).
        assert await tracker.finish_many(items) == out
        again = await tracker.finish(leases[0], transition=_PLAIN, idempotency_key="k0")
        assert again == out[0]
        with pytest.raises(Conflict, match="idempotency key 'k1'"):
            await tracker.finish(leases[1], transition={"trigger": "other"}, idempotency_key="k1")
        runs = await tracker.list_runs(ids[0])
        assert [r.status for r in runs] == ["completed"]
    finally:
        await tracker.aclose()


async def test_items_the_fast_path_leaves_are_answered_in_their_place(
    pg_server: PgServer,
) -> None:
    tracker: Any = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_tasks([new_task(pid, f"t{i}", priority=-i) for i in range(4)])
        leases = await tracker.call(
            "claim_many", agent_id="a", agent_role="coder", lease_ttl_ms=60_000, n=4
        )
        revoked = leases[3]
        await tracker.cancel(revoked.task.id)
        items = [
            FinishItem(lease=leases[0], transition=_PLAIN),
            FinishItem(lease=leases[1], fail={"error": "boom", "retryable": True}),
            FinishItem(
                lease=leases[2], events=({"kind": "note", "data": {"n": 1}},), transition=_PLAIN
            ),
            FinishItem(lease=revoked, transition=_PLAIN),
        ]
        out = await tracker.finish_many(items)
        first, failed, noted, lost = out
        assert isinstance(first, FinishResult) and first.transition is not None
        assert isinstance(failed, FinishResult) and failed.fail is not None
        assert isinstance(noted, FinishResult) and len(noted.event_ids) == 1
        assert isinstance(lost, LeaseLost)
        assert (await tracker.get_task(leases[0].task.id)).stage == "done"
        assert (await tracker.get_task(leases[2].task.id)).stage == "done"
        assert (await tracker.get_task(leases[1].task.id)).latest_run.status == "failed"
    finally:
        await tracker.aclose()


async def test_duplicates_in_one_call_are_answered_as_one_after_the_other(
    pg_server: PgServer,
) -> None:
    # The client plans each lease once, so these duplicates are sent to bw_finish_many_tx
    # itself: a run named twice is written for its first item (the second, answered "not
    # written", then finds the lease gone on the embedded path), and one new key on two items
    # is the first item's finish (the second is answered by the embedded path: a conflict).
    tracker: Any = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_tasks([new_task(pid, f"t{i}", priority=-i) for i in range(3)])
        a, b, c = await tracker.call(
            "claim_many", agent_id="a", agent_role="coder", lease_ttl_ms=60_000, n=3
        )
        twice = tracker._plan_item(FinishItem(lease=a, transition=_PLAIN))[0]
        assert await tracker._one_trip_many([twice, twice]) == [True, False]
        moves = (await tracker.list_task_events(a.task.id, kind="transition")).items
        assert len(moves) == 1
        assert (await tracker.get_task(a.task.id)).task_version == 2

        same = [
            tracker._plan_item(FinishItem(lease=lease, transition=_PLAIN, idempotency_key="k"))[0]
            for lease in (b, c)
        ]
        assert await tracker._one_trip_many(same) == [True, False]
        assert (await tracker.get_task(b.task.id)).stage == "done"
        assert (await tracker.get_task(c.task.id)).stage == "todo"  # nothing of it written
    finally:
        await tracker.aclose()


async def test_a_lane_connection_dropped_is_unavailable_then_replaced(
    pg_server: PgServer,
) -> None:
    app = "lane" + uuid.uuid4().hex[:10]
    tracker = await open_tracker(_url(application_name=app, pool_size=2))
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(3)])
        first = await claim(tracker)  # the lane's connection is open now
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (app,),
            ).fetchall()
        assert killed and all(ok for (ok,) in killed)
        with pytest.raises(TrackerUnavailable) as err:
            await tracker.claim("a", "coder", 60_000)
        assert err.value.code == "unavailable"
        second = await claim(tracker)  # a fresh connection
        assert second.task.id != first.task.id
        assert (await tracker.transition(second, "complete")).new_stage == "done"
    finally:
        await tracker.aclose()


async def test_a_cancelled_hot_call_still_ends_and_the_lane_goes_on(pg_server: PgServer) -> None:
    tracker: Any = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        task_id = await tracker.create_task(new_task(pid))
        lease = await claim(tracker)
        with anyio.CancelScope() as scope:
            scope.cancel()  # already cancelled when the call starts: shielded, it runs
            await tracker.transition(lease, "complete", idempotency_key="once")
        assert (await tracker.get_task(task_id)).stage == "done"
        await tracker.create_task(new_task(pid, "next"))
        assert (await claim(tracker)).task.title == "next"
    finally:
        await tracker.aclose()


def test_one_tracker_serves_two_event_loops_in_turn(pg_server: PgServer) -> None:
    """A tracker opened on one loop and then used from another (a blocking portal's thread,
    say): the lane drops the first loop's connections and opens new ones on the second."""

    async def setup() -> tuple[Any, str]:
        tracker: Any = await open_tracker(_url())
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(2)])
        await claim(tracker)
        return tracker, pid

    tracker, _pid = anyio.run(setup)
    answers: list[Any] = []

    def other_loop() -> None:
        async def use() -> None:
            try:
                answers.append(await claim(tracker))
            finally:
                await tracker.aclose()

        anyio.run(use)

    thread = threading.Thread(target=other_loop)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    assert len(answers) == 1 and answers[0].task.title in {"t0", "t1"}


async def test_without_the_lane_the_hot_calls_run_on_the_pool(
    pg_server: PgServer, sent: _Sent
) -> None:
    """The same one-statement calls on a pool thread (what a loop other than asyncio, or a
    second loop while the lane is busy, gets): one round trip each, the same answers."""
    tracker: Any = await open_tracker(_url())
    try:
        tracker.engine.db.lane = None  # every call on the pool (see Database.lane)
        pid = await make_pipeline(tracker, simple_pipeline())
        ids = await tracker.create_tasks([new_task(pid, f"t{i}", priority=-i) for i in range(3)])
        before = sent.count
        leases = await tracker.call(
            "claim_many", agent_id="a", agent_role="coder", lease_ttl_ms=60_000, n=2
        )
        single = await tracker.claim("a", "coder", 60_000)
        moved = await tracker.transition(single, "complete", idempotency_key="t")
        out = await tracker.finish_many(
            [
                FinishItem(lease=lease, transition=_PLAIN, idempotency_key=lease.run_id)
                for lease in leases
            ]
        )
        assert sent.count - before == 4
        assert [lease.task.id for lease in [*leases, single]] == ids
        assert moved.new_stage == "done"
        assert all(isinstance(o, FinishResult) and o.transition is not None for o in out)
        assert {(await tracker.get_task(i)).stage for i in ids} == {"done"}
        assert (
            await tracker.finish_many(
                [
                    FinishItem(lease=lease, transition=_PLAIN, idempotency_key=lease.run_id)
                    for lease in leases
                ]
            )
            == out
        )  # replayed from the records
    finally:
        await tracker.aclose()


async def test_a_full_lane_queues_calls_in_turn_and_hands_each_slot_on(pg_server: PgServer) -> None:
    """More calls than the lane's connections: the rest wait, first come first served, never
    more in flight than its size; a call that fails hands its slot on all the same."""
    lane = aio.Lane(pg_server.url, {"autocommit": True}, 2, lambda conn: None)
    started: list[int] = []
    in_flight = most = 0

    async def job(i: int, conn: psycopg.AsyncConnection[Any]) -> int:
        nonlocal in_flight, most
        started.append(i)
        in_flight += 1
        most = max(most, in_flight)
        try:
            await conn.execute("SELECT pg_sleep(0.05)")
            if i == 2:
                await conn.execute("SELECT 1/0")  # fails: its slot goes to the next call
        finally:
            in_flight -= 1
        return i

    answers: dict[int, Any] = {}

    async def call(i: int) -> None:
        try:
            answers[i] = await lane.run(lambda conn: job(i, conn))
        except psycopg.errors.DivisionByZero:
            answers[i] = "failed"

    try:
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(call, i)
                await anyio.lowlevel.checkpoint()  # each call asks in this order
    finally:
        lane.close()
    # the first two open a connection each (in either order), the rest take turns
    assert sorted(started[:2]) == [0, 1] and started[2:] == [2, 3, 4]
    assert most == 2
    assert answers == {0: (True, 0), 1: (True, 1), 2: "failed", 3: (True, 3), 4: (True, 4)}
