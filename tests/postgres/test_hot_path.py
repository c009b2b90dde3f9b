"""The PostgreSQL rail's hot path: round trips per operation, and its rules under concurrency.

Claims, heartbeats, events, transitions, fails, releases and ``finish`` run beside each other
(the write lock in shared mode, the task's row locked by the lease read); what they may not do
shared (a dead letter and its propagation, fan-in edges) sends them round again alone. These
tests count the statements each operation sends to a real server (psycopg's own ``execute``,
wrapped to count, nothing answered for it) and drive two instances at once over one rail:
dependencies resolve once, concurrency keys hold one lease, a replayed idempotency key answers
the first call's result, a dead letter propagates.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any

import anyio
import psycopg
import pytest

from tests.contract.support import claim, make_pipeline, new_task, simple_pipeline
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tracker_client.errors import BacklogFull, TrackerUnavailable
from tracker_client.factory import open_tracker
from tracker_client.models import CORRUPT_MARKER, Lease, RetryPolicy
from tracker_client.postgres import aio
from tracker_client.postgres.claims import lease_of_row
from tracker_client.postgres.dialect import STATEMENTS, NeedExclusive, PgConn, row_factory
from tracker_client.rules import common
from worker.logs import TrackerRunLines

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _url(**options: Any) -> str:
    return fresh_schema_url(f"hot-{uuid.uuid4()}", **options)


@pytest.fixture(autouse=True)
def _quiet(quiet_tracker_log: None) -> None:
    """Every test here counts the one-trip paths (see conftest's ``quiet_tracker_log``)."""


class _Sent:
    """Counts the queries psycopg sends, on the pool and on the async lane (one ``execute``,
    one :func:`~tracker_client.postgres.aio.prepared_call` or one
    :func:`~tracker_client.postgres.aio.simple_query` is one round trip)."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> _Sent:
    counter = _Sent()
    real = psycopg.Cursor.execute
    real_async = psycopg.AsyncCursor.execute

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter.count += 1
        return real(self, *args, **kwargs)

    async def counting_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter.count += 1  # the hot path's async lane (tracker_client/postgres/aio.py)
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


async def test_each_hot_operation_is_a_few_round_trips(pg_server: PgServer, sent: _Sent) -> None:
    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(4)])
        trips: dict[str, int] = {}

        async def count(name: str, call: Any) -> Any:
            before = sent.count
            result = await call
            trips[name] = sent.count - before
            return result

        key = uuid.uuid4().hex
        leases = await count(
            "claim_many",
            tracker.call(
                "claim_many",
                agent_id="a",
                agent_role="coder",
                lease_ttl_ms=60_000,
                n=3,
                idempotency_key=key,
            ),
        )
        assert len(leases) == 3
        await count("claim", tracker.claim("a", "coder", 60_000, idempotency_key=key))
        await count("heartbeat", tracker.heartbeat(leases[0]))
        await count(
            "add_event", tracker.add_event(leases[0], "note", {"n": 1}, idempotency_key=key)
        )
        await count("transition", tracker.transition(leases[0], "complete", idempotency_key=key))
        await count("fail", tracker.fail(leases[1], "boom", idempotency_key=key))
        await count("release", tracker.call("release", leases[2], reason="later"))
        await count("first create_task", tracker.create_task(new_task(pid, "a first")))
        await count("create_task", tracker.create_task(new_task(pid, "a submit")))
        # BEGIN and the lock travel with the first statement, the writes nobody reads with
        # the COMMIT; a claim of n leases is n claim statements more. A create: its backlog
        # cap's check (schema 18, on the server), insert, wake-up and COMMIT in one; the
        # first on its connection prepares the insert before (once per connection).
        assert trips == {
            "first create_task": 2,
            "create_task": 1,
            "claim_many": 1,
            "claim": 1,
            "heartbeat": 2,
            "add_event": 4,
            "transition": 1,
            "fail": 4,
            "release": 3,
        }
    finally:
        await tracker.aclose()


async def test_a_batch_over_shared_concurrency_keys_is_still_one_trip(
    pg_server: PgServer, sent: _Sent
) -> None:
    # bw_claim (schema 12) scans once and cuts the batch after its first keyed candidate;
    # the slots left go one by one in the same statement. Leasing two rows of one key would
    # hit the live-key unique index and send the claim round again the embedded way.
    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker)
        ids = [
            await tracker.create_task(new_task(pid, name, priority=prio, concurrency_key=key))
            for name, prio, key in [
                ("x", 9, None),
                ("a1", 8, "a"),
                ("a2", 7, "a"),
                ("y", 6, None),
                ("b1", 5, "b"),
                ("z", 4, None),
            ]
        ]
        before = sent.count
        leases = await tracker.call(
            "claim_many", agent_id="a", agent_role="coder", lease_ttl_ms=60_000, n=5
        )
        assert sent.count - before == 1  # (a batch short of n would also note a waiter)
        assert [lease.task.id for lease in leases] == [ids[0], ids[1], ids[3], ids[4], ids[5]]
    finally:
        await tracker.aclose()


async def test_a_replayed_key_answers_the_first_result_even_when_concurrent(
    pg_server: PgServer,
) -> None:
    url = _url(pool_size=4)
    first, second = await open_tracker(url), await open_tracker(url)
    try:
        pid = await make_pipeline(first)
        await first.create_task(new_task(pid))
        lease = await claim(first)
        results: list[Any] = []

        async def report(tracker: Any) -> None:
            results.append(await tracker.transition(lease, "complete", idempotency_key="same"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(report, first)
            tg.start_soon(report, second)
        assert len(results) == 2 and results[0] == results[1]
        assert results[0].new_stage == "done"
    finally:
        await first.aclose()
        await second.aclose()


async def test_dependents_are_claimed_once_their_upstreams_finish_concurrently(
    pg_server: PgServer,
) -> None:
    url = _url(pool_size=4)
    first, second = await open_tracker(url), await open_tracker(url)
    try:
        pid = await make_pipeline(first)
        ups = await first.create_tasks([new_task(pid, f"up{i}") for i in range(20)])
        downs = await first.create_tasks(
            [new_task(pid, f"down{i}", dependencies=[ups[i], ups[(i + 1) % 20]]) for i in range(20)]
        )
        # Each task's id goes in before its transition is sent: the transition commits before
        # its caller resumes, and another agent's claim of a dependent can come in between.
        finishing: set[str] = set()
        got: list[str] = []

        async def drain(tracker: Any, agent: str) -> None:
            while (lease := await tracker.claim(agent, "coder", 60_000)) is not None:
                if lease.task.id in downs:
                    i = downs.index(lease.task.id)
                    assert {ups[i], ups[(i + 1) % 20]} <= finishing
                got.append(lease.task.id)
                finishing.add(lease.task.id)
                await tracker.transition(lease, "complete")

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(drain, first, f"a{n}")
                tg.start_soon(drain, second, f"b{n}")
        # A worker that found nothing while upstreams were still leased stops early: finish.
        await drain(first, "last")
        assert sorted(got) == sorted([*ups, *downs])
    finally:
        await first.aclose()
        await second.aclose()


async def test_claim_many_of_two_instances_never_share_a_task_or_a_key(
    pg_server: PgServer,
) -> None:
    url = _url(pool_size=4)
    first, second = await open_tracker(url), await open_tracker(url)
    try:
        pid = await make_pipeline(first)
        keyed = [new_task(pid, f"k{i}", concurrency_key=f"key-{i % 3}") for i in range(9)]
        await first.create_tasks([*keyed, *(new_task(pid, f"free{i}") for i in range(40))])
        leases: list[Any] = []

        async def grab(tracker: Any, agent: str) -> None:
            while got := await tracker.call(
                "claim_many", agent_id=agent, agent_role="coder", lease_ttl_ms=60_000, n=5
            ):
                leases.extend(got)

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(grab, first, f"a{n}")
                tg.start_soon(grab, second, f"b{n}")
        keys = [lease.task.concurrency_key for lease in leases if lease.task.concurrency_key]
        assert sorted(keys) == ["key-0", "key-1", "key-2"]
        assert len({lease.task.id for lease in leases}) == len(leases) == 43
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_dead_letter_from_a_shared_fail_propagates_to_dependents(
    pg_server: PgServer,
) -> None:
    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        up = await tracker.create_task(
            new_task(
                pid, "up", retry_policy=RetryPolicy(max_attempts=1, dead_letter_stage="failed")
            )
        )
        down = await tracker.create_task(new_task(pid, "down", dependencies=[up]))
        lease = await claim(tracker)
        result = await tracker.fail(lease, "boom")
        assert result.dead_lettered and result.dead_letter_reason == "max_attempts_exceeded"
        dependent = await tracker.get_task(down)
        assert dependent.dead_letter_reason == "upstream_dead_lettered"
        assert await tracker.claim("a", "coder", 60_000) is None
    finally:
        await tracker.aclose()


async def test_a_transition_with_wait_for_runs_alone_and_waits(pg_server: PgServer) -> None:
    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        other = await tracker.create_task(new_task(pid, "other", priority=-1))
        await tracker.create_task(new_task(pid, "first", priority=5))
        lease = await claim(tracker)
        moved = await tracker.transition(lease, "complete", wait_for=[other])
        assert moved.new_stage == "done"
        second = await claim(tracker)
        assert second.task.id == other
    finally:
        await tracker.aclose()


async def test_a_one_trip_transition_writes_what_the_embedded_one_writes(
    pg_server: PgServer, sent: _Sent
) -> None:
    from tracker_client.errors import Conflict

    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        task_id = await tracker.create_task(new_task(pid))
        lease = await claim(tracker)
        before = sent.count
        moved = await tracker.transition(
            lease, "complete", usage={"tokens": 3}, idempotency_key="k"
        )
        assert sent.count - before == 1  # BEGIN, lock, the function, NOTIFY, COMMIT together
        assert (moved.previous_stage, moved.new_stage, moved.trigger) == (
            "todo",
            "done",
            "complete",
        )
        # A replay answers the record (the embedded path: the lease is gone); another request
        # under the key is refused naming the key.
        assert (
            await tracker.transition(lease, "complete", usage={"tokens": 3}, idempotency_key="k")
            == moved
        )
        with pytest.raises(Conflict, match="idempotency key 'k'"):
            await tracker.transition(lease, "complete", idempotency_key="k")
        detail = await tracker.get_task(task_id)
        assert (detail.stage, detail.task_version) == ("done", 2)
        assert detail.latest_run is not None and detail.latest_run.status == "completed"
        assert detail.latest_run.usage == {"tokens": 3}
        events = (await tracker.list_task_events(task_id, kind="transition")).items
        assert [e.data for e in events] == [
            {"trigger": "complete", "from": "todo", "to": "done", "instructions": ""}
        ]
    finally:
        await tracker.aclose()


async def test_a_one_trip_transition_of_a_revoked_lease_is_refused_as_embedded(
    pg_server: PgServer,
) -> None:
    from tracker_client.errors import InvalidTransition, LeaseLost

    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        first = await tracker.create_task(new_task(pid, "a", priority=2))
        await tracker.create_task(new_task(pid, "b"))
        lease = await claim(tracker)
        await tracker.cancel(first)
        with pytest.raises(LeaseLost) as lost:
            await tracker.transition(lease, "complete")
        assert lost.value.code == "revoked"
        other = await claim(tracker)
        with pytest.raises(InvalidTransition, match="not allowed"):
            await tracker.transition(other, "nope")
        assert (await tracker.transition(other, "complete")).new_stage == "done"
    finally:
        await tracker.aclose()


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize(
    ("bad", "says"),
    [("{broken", "not valid JSON"), ("[" * 300 + "]" * 300, "nested deeper than 64 levels")],
    ids=["invalid", "too-deep"],
)
async def test_a_corrupt_row_is_refused_and_the_claim_goes_on(
    pg_server: PgServer, batch: bool, bad: str, says: str
) -> None:
    key = f"hot-{uuid.uuid4()}"
    tracker = await open_tracker(fresh_schema_url(key))
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        task = await tracker.create_task(new_task(pid, "bad", priority=9))
        good = await tracker.create_task(new_task(pid, "good"))
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute(
                f"UPDATE {schema_name(key)}.tasks SET metadata = %s WHERE id = %s", (bad, task)
            )
        shown = await tracker.get_task(task)  # reads show the marker
        assert says in shown.metadata[CORRUPT_MARKER]
        if batch:
            leases = await tracker.call(
                "claim_many", agent_id="a", agent_role="coder", lease_ttl_ms=60_000, n=5
            )
        else:
            leases = [await claim(tracker)]
        assert [lease.task.id for lease in leases] == [good]
        refused = await tracker.list_task_events(task, kind="corrupt_row")
        assert len(refused.items) == 1
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT dead_letter_reason, lease_run_id FROM {schema_name(key)}.tasks "
                "WHERE id = %s",
                (task,),
            ).fetchone()
        assert row == ("corrupt_row", None)
    finally:
        await tracker.aclose()


async def test_a_one_trip_claim_hands_out_the_previous_checkpoint(pg_server: PgServer) -> None:
    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_task(new_task(pid))
        first = await claim(tracker)
        await tracker.heartbeat(first, checkpoint={"step": 2})
        held: Any = first  # call() types its path parameters as str; a lease is taken too
        await tracker.call("release", held, reason="later")
        again = await claim(tracker)
        assert again.task.id == first.task.id
        assert again.previous_checkpoint == {"step": 2}
    finally:
        await tracker.aclose()


def test_a_shared_transaction_refuses_a_write_it_may_not_make_alone_naming_it() -> None:
    # No server needed: the check comes before anything is sent.
    conn = PgConn.__new__(PgConn)
    conn.shared, conn.write, conn.pending, conn.begin = True, True, [], ""
    with pytest.raises(NeedExclusive, match=r"tasks\.add_dependency"):
        conn.execute(STATEMENTS["tasks.add_dependency"], ("t", "u", 0))
    assert not conn.pending  # nothing queued


def test_the_writes_a_shared_transaction_may_make_are_named_ones() -> None:
    # The whitelist of writes beside other claims (hint ``shared``): a lease's own writes and
    # its task's events and idempotency record; adding one is a decision, made here too.
    shared = {name for name, s in STATEMENTS.items() if s.hint("shared") is not None}
    assert shared == {
        # a run's reported cost and its task's loop count (docs/operate/budgets.md): the
        # leased task's own row, locked by the lease read, as runs.move writes it
        "budgets.spend",
        "budgets.visit",
        "claims.extend",
        # a lease claimed ahead and never handed out, withdrawn: its task's row and its run
        "claims.withdraw_lease",
        "claims.withdraw_run",
        "common.add_event",
        "idempotency.record",
        "release.drop_lease",
        "release.end_run",
        "runs.complete",
        "runs.count_failure",
        "runs.fail",
        "runs.move",
        "runs.retry_at",
    }
    deferred = {name for name, s in STATEMENTS.items() if s.hint("deferred") is not None}
    # An event's id is read (lastrowid), a withdrawal's count too (whether the lease was still
    # as claimed); a create's cap check and insert (an exclusive write whose answer nobody
    # reads) travel with its COMMIT: a submit is one round trip, not three; so does its offer
    # to the standing claims of its tasks' roles, and the NOTIFY of what they were granted
    # (postgres/standing.py).
    read = {"common.add_event", "claims.withdraw_lease"}
    create = {"tasks.insert", "tasks_cap.check", "standing.offer", "standing.grants"}
    assert deferred == (shared - read) | create


def test_raw_sql_is_refused_naming_where_statements_live() -> None:
    conn = PgConn.__new__(PgConn)
    conn.shared, conn.write, conn.pending, conn.begin = False, True, [], ""
    raw: Any = "SELECT 1"  # a str, not a named Statement
    with pytest.raises(TypeError, match=r"named statements .*not raw SQL: 'SELECT 1'"):
        conn.execute(raw)
    assert not conn.pending


def _count_queries(monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], list[str]]:
    """From now on, every query psycopg sends: (those on the event loop's async connections,
    psycopg's and the lane's gathered writes on libpq, those on the pool's threads), each in
    the order sent."""
    on_loop: list[bytes] = []
    on_pool: list[str] = []
    real_async, real = psycopg.AsyncCursor.execute, psycopg.Cursor.execute
    real_simple = aio.simple_query

    async def async_counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        on_loop.append(query if isinstance(query, bytes) else str(query).encode())
        return await real_async(self, query, *args, **kwargs)

    async def simple_counting(conn: Any, query: bytes) -> None:
        on_loop.append(query)
        await real_simple(conn, query)

    def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        on_pool.append(str(query))
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", async_counting)
    monkeypatch.setattr(aio, "simple_query", simple_counting)
    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    return on_loop, on_pool


async def test_a_create_is_one_trip_on_the_event_loop_and_a_refusal_rolls_it_back(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Schema 18: the cap check travels with the insert and the COMMIT, sent on the event
    # loop's own connection (no pool thread); a refusal at the cap rolls back and the next
    # create goes on that same connection.
    tracker = await open_tracker(_url(max_backlog_depth=2))
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_task(new_task(pid, "warm"))  # the pipeline read, once
        on_loop, on_pool = _count_queries(monkeypatch)
        await tracker.create_task(new_task(pid, "second"))
        # the first create on the loop's connection prepares its lock, insert and follow
        # notify first, in one round trip (once per connection)
        assert (len(on_loop), on_pool) == (2, [])
        assert on_loop[0].split(b" AS ")[0] == b"PREPARE _bw_write_lock"
        assert b";PREPARE _bw_task_insert AS INSERT INTO tasks " in on_loop[0]
        assert b";PREPARE _bw_follow_notify AS SELECT pg_notify($1, $2)" in on_loop[0]
        trip = on_loop[1]
        assert trip.startswith(b"BEGIN;EXECUTE _bw_write_lock;") and trip.endswith(b"COMMIT")
        assert b"bw_backlog_check" in trip and b"EXECUTE _bw_task_insert(" in trip
        assert b"EXECUTE _bw_follow_notify(" in trip and b"INSERT" not in trip
        with pytest.raises(BacklogFull) as err:
            await tracker.create_task(new_task(pid, "third"))
        assert (err.value.role, err.value.depth, err.value.cap) == ("coder", 2, 2)
        assert on_loop[-1] == b"ROLLBACK" and on_pool == []
        await tracker.call("claim", agent_id="a", role="coder", lease_ttl_ms=60_000)
        before = len(on_loop)
        await tracker.create_task(new_task(pid, "fits"))
        assert len(on_loop) == before + 1 and on_pool == []
        assert await tracker.count_tasks() == 3
    finally:
        monkeypatch.undo()
        await tracker.aclose()


async def test_a_create_on_a_new_connection_prepares_its_statements_again(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The create's statements are prepared once per connection: a lane connection the server
    # dropped is replaced, and the new one prepares them before its first create (an
    # EXECUTE of a statement it lacks would fail every create on it).
    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker)
        made = [await tracker.create_task(new_task(pid, f"before {i}")) for i in range(2)]
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND query LIKE %s",
                ("%EXECUTE _bw_follow_notify(%",),
            ).fetchall()
        assert killed and all(ok for (ok,) in killed)
        with contextlib.suppress(TrackerUnavailable):  # the dropped connection's own call
            made.append(await tracker.create_task(new_task(pid, "meets the dropped one")))
        on_loop, on_pool = _count_queries(monkeypatch)
        made.append(await tracker.create_task(new_task(pid, "after")))
        made.append(await tracker.create_task(new_task(pid, "and again")))
        monkeypatch.undo()
        assert on_pool == [] and [q.split(b" ")[0] for q in on_loop] in (
            [b"BEGIN;EXECUTE", b"BEGIN;EXECUTE"],
            [b"PREPARE", b"BEGIN;EXECUTE", b"BEGIN;EXECUTE"],
        )
        assert await tracker.count_tasks() == len(made)
    finally:
        monkeypatch.undo()
        await tracker.aclose()


async def test_a_create_that_reads_runs_on_the_pool_as_before(pg_server: PgServer) -> None:
    # A dedupe key is looked up (a read): the create is gathered, found to need its answer,
    # and run whole on a pooled connection; the answer is the dedupe's.
    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker)
        first = await tracker.create_task(new_task(pid, "a", dedupe_key="k"))
        again = await tracker.create_task(new_task(pid, "b", dedupe_key="k"))
        assert again == first
        assert await tracker.count_tasks() == 1
    finally:
        await tracker.aclose()


async def test_a_create_checks_a_cached_pipeline_version_on_the_server(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past RECENT_MS the rules look at the pipeline's version again: on the event loop the
    # version this process knows goes with the insert and the server checks it (schema 18,
    # bw_pipeline_is): still one round trip. Another process applied a new version meanwhile:
    # the create is rolled back and runs again the rail's way, under the new version.
    from tracker_client.rules import pipelines

    monkeypatch.setattr(pipelines, "RECENT_MS", -1)  # every create looks again
    key = f"hot-{uuid.uuid4()}"
    tracker, other = (
        await open_tracker(fresh_schema_url(key)),
        await open_tracker(fresh_schema_url(key)),
    )
    try:
        name = f"versioned-{uuid.uuid4().hex[:8]}"
        pid = await tracker.create_pipeline(name, simple_pipeline())
        await tracker.create_task(new_task(pid, "reads the version once"))
        on_loop, on_pool = _count_queries(monkeypatch)
        await tracker.create_task(new_task(pid, "checked on the server"))
        sent = [q for q in on_loop if not q.startswith(b"PREPARE ")]  # once per connection
        assert (len(sent), len(on_loop) <= 2, on_pool) == (1, True, [])
        assert b"bw_pipeline_is" in sent[0]
        monkeypatch.undo()
        monkeypatch.setattr(pipelines, "RECENT_MS", -1)
        second = simple_pipeline()
        second["states"]["done"] = {"terminal": True, "description": "version 2"}
        await other.apply_pipeline(name, second)
        on_loop, on_pool = _count_queries(monkeypatch)
        moved = await tracker.create_task(new_task(pid, "after another version"))
        assert on_pool, "the declined create ran again on a pooled connection"
        monkeypatch.undo()
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT pipeline_version FROM {schema_name(key)}.tasks WHERE id = %s", (moved,)
            ).fetchone()
        assert row == (2,)
        assert await tracker.count_tasks() == 3
    finally:
        monkeypatch.undo()
        await tracker.aclose()
        await other.aclose()


@pytest.mark.parametrize("muted", [True, False], ids=["a worker at INFO", "rail lines wanted"])
async def test_info_logging_keeps_the_one_trip_paths_when_their_lines_are_muted(
    pg_server: PgServer,
    sent: _Sent,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    muted: bool,
) -> None:
    # A worker at the default INFO mutes the rail's lines that repeat its runs' own
    # (worker.logs.TrackerRunLines.REPEATS): the one-trip claim and transition, which cannot
    # write those lines, step aside only where the lines are wanted.
    caplog.set_level(logging.INFO, logger="backlog_worker.tracker")
    monkeypatch.setattr(common, "MUTED_ACTIONS", set(TrackerRunLines.REPEATS) if muted else set())
    tracker = await open_tracker(_url())
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(2)])
        before = sent.count
        leases = await tracker.claim_many("a", "coder", 60_000, 2, idempotency_key="k")
        claim_trips = sent.count - before
        before = sent.count
        await tracker.transition(leases[0], "complete", idempotency_key="t")
        transition_trips = sent.count - before
        lines = {r.__dict__.get("action") for r in caplog.records}
        if muted:
            assert (claim_trips, transition_trips) == (1, 1)
            assert not lines & {"task_claimed", "task_finished"}
        else:
            assert claim_trips > 1 and transition_trips > 1
            assert {"task_claimed", "task_finished"} <= lines
    finally:
        await tracker.aclose()


async def test_a_claimed_lease_is_what_its_whole_row_validates_to(pg_server: PgServer) -> None:
    # The one-trip claim validates only the task's own fields of a leased row
    # (claims.lease_of_row); its leases must be what the whole row validated to before.
    key = f"hot-{uuid.uuid4()}"
    tracker = await open_tracker(fresh_schema_url(key))
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_tasks(
            [
                new_task(pid, "plain"),
                new_task(pid, "keyed", priority=5, concurrency_key="k", max_stale_attempts=3),
                new_task(pid, "budgeted", budgets={"max_runs": 4}),
            ]
        )
        leases = await tracker.claim_many("a1", "coder", 60_000, 3)
    finally:
        await tracker.aclose()
    assert len(leases) == 3
    with psycopg.connect(pg_server.url) as conn:
        conn.row_factory = row_factory
        for lease in leases:
            row = conn.execute(
                f"SELECT * FROM {schema_name(key)}.tasks WHERE id = %s", (lease.task.id,)
            ).fetchone()
            assert row is not None
            token = lease.lease_token.get_secret_value()
            whole = Lease.model_validate(
                {
                    "task": {**row.as_dict(), "metadata": {}},
                    "run": lease.run.model_dump(),
                    "lease_id": lease.lease_id,
                    "lease_token": token,
                    "expires_at_ms": row["lease_expires_at_ms"],
                    "previous_checkpoint": None,
                }
            )
            built = lease_of_row(
                row, lease.run.started_at_ms, lease.run.id, lease.lease_id, token, "a1", "coder"
            )
            assert built is not None
            assert (built, built.task.model_fields_set) == (whole, whole.task.model_fields_set)
            assert (lease, lease.task.model_fields_set) == (whole, whole.task.model_fields_set)
    assert leases[2].task.budgets == {"max_runs": 4}
