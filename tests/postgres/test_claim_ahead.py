"""Claiming ahead (``tracker_client/ahead.py``), against a real server.

While one agent drains a role, a ``finish_many`` of its runs also claims its next batch in the
same statement; the next ``claim_many`` is answered from those leases with no round trip. A
kept lease is a real lease (heartbeat and transition work under its token); an unused one is
withdrawn (no run left, the attempt count as it was) when the rail closes, when it waits too
long, or when another agent, role or TTL is asked for; a replayed key is answered as the first
call was; a lost answer strands nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import psycopg
import pytest

from tests.contract.support import (
    check_stale_kept_leases_are_withdrawn,
    check_withdraw_takes_only_untouched,
    check_withdrawn_without_a_trace,
    make_pipeline,
    new_task,
    simple_pipeline,
)
from tests.postgres.batch_rail import finish_items, leased_rail, pair_answer_lost
from tests.postgres.drain_hosts import drain_losing_one
from tests.postgres.server import PgServer, fresh_schema_url, schema_name, shared_server
from tracker_client.contract.batch_models import FinishResult
from tracker_client.errors import ConfigError, Conflict, TrackerUnavailable
from tracker_client.factory import open_tracker
from tracker_client.models import Lease

# the one-trip paths only (see conftest's ``quiet_tracker_log``)
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quiet_tracker_log"),
]


async def _rail(tasks: int, **options: Any) -> tuple[Any, str, list[Lease]]:
    return await leased_rail(f"ahead-{uuid.uuid4()}", tasks, "k0", **options)


async def _leased(tracker: Any) -> set[str]:
    """Ids of the tasks under a live lease now (read from the rows)."""
    db = tracker.engine.db
    with psycopg.connect(shared_server().url) as conn:
        rows = conn.execute(
            f"SELECT id FROM {db.schema}.tasks WHERE lease_expires_at_ms > 0"
        ).fetchall()
    return {str(row[0]) for row in rows}


async def test_the_next_batch_rides_with_the_reports_and_is_answered_without_a_trip(
    pg_server: PgServer, sent_queries: list[str]
) -> None:
    tracker, _, leases = await _rail(9)
    try:
        sent_queries.clear()
        finished = await tracker.finish_many(finish_items(leases, "f"))
        assert all(isinstance(o, FinishResult) for o in finished)
        # one statement: the reports and a claim of the next batches (3, what was asked
        # last, and 3 more: the last claim found none kept, so one batch is kept while the
        # next is flushed)
        assert len(sent_queries) == 1 and "bw_finish_claim_tx" in sent_queries[0]
        assert tracker.engine.pairs.paired == 1
        kept = await _leased(tracker)
        assert len(kept) == 6
        sent_queries.clear()
        nxt = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k1")
        assert sent_queries == []  # answered from the kept leases: no round trip
        assert {x.task.id for x in nxt} < kept
        # real leases: a heartbeat and a transition under their tokens work
        await tracker.heartbeat(nxt[0])
        done = await tracker.finish_many(finish_items(nxt, "g"))
        assert all(isinstance(o, FinishResult) for o in done)
        # a replay under the key answers the same leases, those still live: none now
        assert await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k1") == []
        # the rest of the kept ones, then the role is drained
        last = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k2")
        assert {x.task.id for x in last} == kept - {x.task.id for x in nxt}
    finally:
        await tracker.aclose()


async def test_a_replay_answers_the_same_leases_and_other_arguments_conflict(
    pg_server: PgServer,
) -> None:
    tracker, _, leases = await _rail(9)
    try:
        await tracker.finish_many(finish_items(leases, "f"))
        first = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k1")
        again = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k1")
        assert [(x.run.id, x.lease_token.get_secret_value()) for x in again] == [
            (x.run.id, x.lease_token.get_secret_value()) for x in first
        ]
        with pytest.raises(Conflict, match="k1"):
            await tracker.claim_many("a", "coder", 60_000, 2, idempotency_key="k1")
        # a replay of a key answered by the server is the server's: never kept leases
        replay = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k0")
        assert {x.run.id for x in replay} <= {x.run.id for x in leases}
    finally:
        await tracker.aclose()


async def test_closing_the_rail_withdraws_the_kept_leases_without_a_trace(
    pg_server: PgServer,
) -> None:
    """A lease no claim took is withdrawn: no run of it stays, nothing is counted, and the
    task's next run is its first attempt (an executor never sees attempt 2 of a task whose
    attempt 1 never ran)."""
    tracker, url, leases = await _rail(9)
    await tracker.finish_many(finish_items(leases, "f"))
    kept = await _leased(tracker)
    assert len(kept) == 6
    await tracker.aclose()
    other: Any = await open_tracker(url)
    try:
        await check_withdrawn_without_a_trace(other, kept)
    finally:
        await other.aclose()


async def test_a_kept_lease_that_waits_too_long_is_withdrawn_and_work_claimed_fresh(
    pg_server: PgServer,
) -> None:
    tracker, _, leases = await _rail(12)
    try:
        await tracker.finish_many(finish_items(leases, "f"))
        kept = await _leased(tracker)
        await check_stale_kept_leases_are_withdrawn(tracker, kept, idempotency_key="k1")
    finally:
        await tracker.aclose()


async def test_a_lease_that_moved_on_is_not_withdrawn(pg_server: PgServer) -> None:
    """Withdrawing checks the lease is still as claimed: one cancelled meanwhile stays as
    the cancel left it."""
    tracker, _, leases = await _rail(9)
    try:
        await tracker.finish_many(finish_items(leases, "f"))
        kept = sorted(await _leased(tracker))
        await tracker.cancel(kept[0])
        tracker._ahead.max_age_s = 0.0
        await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k1")
        runs = await tracker.list_runs(kept[0])
        assert [r.status for r in runs] == ["cancelled"]
        assert (await tracker.get_task(kept[0])).dead_letter_reason is not None
    finally:
        await tracker.aclose()


async def test_a_stopping_worker_releasing_a_lease_claims_nothing_ahead(
    pg_server: PgServer,
) -> None:
    """A release (a worker shutting down gives its unfinished runs back) stops claiming ahead
    until the agent claims again: its last reports would lease the tasks it gives back."""
    tracker, _, leases = await _rail(9)
    try:
        await tracker.release(leases[2])
        done = await tracker.finish_many(finish_items(leases[:2], "f"))
        assert all(isinstance(o, FinishResult) for o in done)
        assert await _leased(tracker) == set()
    finally:
        await tracker.aclose()


@pytest.mark.parametrize(
    ("agent", "role_ttl"), [("b", 60_000), ("a", 30_000)], ids=["another agent", "another ttl"]
)
async def test_another_agent_or_ttl_stops_claiming_ahead_and_gets_the_kept_work(
    agent: str,
    role_ttl: int,
    pg_server: PgServer,
) -> None:
    tracker, _, leases = await _rail(9)
    try:
        await tracker.finish_many(finish_items(leases, "f"))
        kept = await _leased(tracker)
        got = await tracker.claim_many(agent, "coder", role_ttl, 6, idempotency_key="b1")
        assert {x.task.id for x in got} == kept  # released, then claimed afresh
        assert got[0].run.agent_id == agent
        await tracker.finish_many(finish_items(got, "g"))
        assert await _leased(tracker) == set()  # never again on this instance
    finally:
        await tracker.aclose()


async def test_a_lost_answer_is_replayed_by_the_next_claim_and_strands_nothing(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracker, _, leases = await _rail(15)
    db = tracker.engine.db
    real = db.one_call

    try:
        monkeypatch.setattr(db, "one_call", pair_answer_lost(real))
        with pytest.raises(TrackerUnavailable):
            await tracker.finish_many(finish_items(leases, "f"))
        monkeypatch.setattr(db, "one_call", real)
        stranded = await _leased(tracker) - {x.task.id for x in leases}
        assert len(stranded) == 6  # the claim ahead was written
        # the reports' retry under their keys writes nothing twice
        again = await tracker.finish_many(finish_items(leases, "f"))
        assert all(isinstance(o, FinishResult) for o in again)
        # the next claim takes the lost claim's leases (replayed under its key)
        nxt = await tracker.claim_many("a", "coder", 60_000, 6, idempotency_key="k1")
        assert {x.task.id for x in nxt} == stranded
        await tracker.finish_many(finish_items(nxt, "g"))
        rest = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k2")
        assert len(rest) == 3
        assert {x.task.id for x in rest}.isdisjoint(stranded)
    finally:
        await tracker.aclose()


async def test_claim_ahead_off_claims_nothing_ahead(
    pg_server: PgServer, sent_queries: list[str]
) -> None:
    tracker, _, leases = await _rail(9, claim_ahead="off")
    try:
        sent_queries.clear()
        await tracker.finish_many(finish_items(leases, "f"))
        assert len(sent_queries) == 1 and "bw_finish_many_tx" in sent_queries[0]
        assert await _leased(tracker) == set()
    finally:
        await tracker.aclose()


@pytest.mark.parametrize("value", ["yes", "", "2"])
async def test_a_bad_claim_ahead_value_is_refused_by_name(pg_server: PgServer, value: str) -> None:
    with pytest.raises(ConfigError, match=r"claim_ahead: expected on or off"):
        await open_tracker(fresh_schema_url(f"ahead-{uuid.uuid4()}", claim_ahead=value))


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_hosts_claiming_ahead_drain_every_task_once_despite_a_sigkill(
    pg_server: PgServer,
) -> None:
    """A process killed with leases kept ahead loses nothing: they lapse and are claimed again;
    no task is finished twice."""
    tasks = 600
    key = f"ahead-hosts-{uuid.uuid4()}"
    url = fresh_schema_url(key, pool_size=2)
    tracker = await open_tracker(url)
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        for start in range(0, tasks, 300):
            await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(start, start + 300)])
    finally:
        await tracker.aclose()
    # 3 processes claiming and finishing in batches; the first SIGKILLed after 60 tasks
    # (its kept leases are left behind)
    _killed, rest = await anyio.to_thread.run_sync(drain_losing_one, "drain_many", url, 3, 60)
    assert any(line.startswith("drained ") for line in rest)
    schema = schema_name(key)
    with psycopg.connect(pg_server.url) as conn:
        stages = conn.execute(f"SELECT stage, count(*) FROM {schema}.tasks GROUP BY stage")
        assert dict(stages.fetchall()) == {"done": tasks}
        twice = conn.execute(
            f"SELECT task_id FROM {schema}.runs WHERE status = 'completed' "
            "GROUP BY task_id HAVING count(*) <> 1"
        ).fetchall()
        assert twice == [], "a task finished twice"
        statuses = dict(
            conn.execute(f"SELECT status, count(*) FROM {schema}.runs GROUP BY status").fetchall()
        )
        assert statuses["completed"] == tasks
        # what the victim held (a batch running, at most two kept) lapsed; the others gave
        # back what they kept when they closed
        assert set(statuses) <= {"completed", "stale", "released"}
        assert statuses.get("stale", 0) <= 15


async def test_a_worker_claiming_one_at_a_time_takes_what_is_kept_and_is_not_claimed_ahead_for(
    pg_server: PgServer, sent_queries: list[str]
) -> None:
    tracker, _, leases = await _rail(9)
    try:
        await tracker.finish_many(finish_items(leases, "f"))  # 6 kept (see the first test)
        kept = await _leased(tracker)
        assert len(kept) == 6
        sent_queries.clear()
        one = await tracker.claim_many("a", "coder", 60_000, 1, idempotency_key="k1")
        assert sent_queries == []  # a kept lease, no round trip
        assert len(one) == 1 and one[0].task.id in kept
        # its report claims nothing ahead: one slot's worker holds what it runs, no more
        await tracker.finish_many(finish_items(one, "g"))
        assert await _leased(tracker) == kept - {one[0].task.id}
        # the rest kept go one by one to one-lease claims; nothing is left leased
        seen = {one[0].task.id}
        for i in range(5):
            got = await tracker.claim_many("a", "coder", 60_000, 1, idempotency_key=f"n{i}")
            assert len(got) == 1
            seen.add(got[0].task.id)
            await tracker.finish_many(finish_items(got, f"h{i}"))
        assert seen == kept and await _leased(tracker) == set()
        assert await tracker.claim_many("a", "coder", 60_000, 1, idempotency_key="n5") == []
    finally:
        await tracker.aclose()


async def test_leases_kept_too_long_are_released_at_the_workers_next_report(
    pg_server: PgServer,
) -> None:
    tracker, _, leases = await _rail(9)
    try:
        await tracker.finish_many(finish_items(leases, "f"))  # 6 kept
        nxt = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k1")
        stale = await _leased(tracker) - {x.task.id for x in nxt}
        assert len(stale) == 3
        tracker._ahead.max_age_s = 0.0  # the 3 still kept are now too old
        tracker._ahead.enabled = False  # (and the reports claim nothing more ahead)
        await tracker.finish_many(finish_items(nxt, "g"))
        # withdrawn: claimable again at once as first attempts, nothing leased any more
        assert await _leased(tracker) == set()
        again = await tracker.claim_many("b", "coder", 60_000, 3, idempotency_key="k2")
        assert {x.task.id for x in again} == stale
        assert {x.run.attempt for x in again} == {1}
    finally:
        await tracker.aclose()


async def test_every_report_of_a_busy_worker_carries_its_next_claim(
    pg_server: PgServer, sent_queries: list[str]
) -> None:
    """A worker's claim for the slots a batch freed comes beside that batch's reports (the
    claimer and the reporter run at once): each report claims a batch ahead, one batch stays
    kept, so no claim goes alone and every statement is a report with its claim."""
    tracker, _, leases = await _rail(60)
    try:
        sent_queries.clear()
        batches = 0
        while leases:
            nxt: list[Lease] = []

            async def claim(into: list[Lease] = nxt) -> None:
                into.extend(await tracker.claim_many("a", "coder", 60_000, 3))

            async with anyio.create_task_group() as tg:
                tg.start_soon(claim)
                await tracker.finish_many(finish_items(leases, f"b{batches}-"))
            leases = nxt
            batches += 1
        assert batches == 20
        lone = [q for q in sent_queries if "bw_finish_claim_tx" not in q]
        # the first claim (nothing kept yet) and the last, finding the role drained
        assert len(lone) <= 2, lone
        assert len(sent_queries) <= batches + 2
    finally:
        await tracker.aclose()


async def test_a_one_lease_claim_takes_a_kept_lease_and_its_replay_answers_it_again(
    pg_server: PgServer, sent_queries: list[str]
) -> None:
    """A worker with one slot free claims one lease (``claim``): it takes a kept one with no
    statement, as a ``claim_many`` of one would; its replay answers the same lease, other
    arguments under the key conflict, and a key the rail answered stays the rail's."""
    tracker, _, leases = await _rail(12)
    try:
        await tracker.finish_many(finish_items(leases, "f"))  # 6 kept (see the first test)
        kept = await _leased(tracker)
        sent_queries.clear()
        one = await tracker.claim("a", "coder", 60_000, idempotency_key="c1")
        assert sent_queries == []  # a kept lease, no round trip
        assert one is not None and one.task.id in kept
        again = await tracker.claim("a", "coder", 60_000, idempotency_key="c1")
        assert again is not None
        assert (again.run.id, again.lease_token.get_secret_value()) == (
            one.run.id,
            one.lease_token.get_secret_value(),
        )
        with pytest.raises(Conflict, match=r"c1.*claim request"):
            await tracker.claim("a", "coder", 30_000, idempotency_key="c1")
        # reported, its replay answers no lease (the rail's record would say the same run)
        await tracker.finish_many(finish_items([one], "g"))
        assert await tracker.claim("a", "coder", 60_000, idempotency_key="c1") is None
        # another agent's claim is not answered from what this agent keeps
        sent_queries.clear()
        other = await tracker.claim("b", "coder", 60_000, idempotency_key="c2")
        assert other is not None and sent_queries != []
    finally:
        await tracker.aclose()


async def test_a_lease_a_run_has_used_is_never_withdrawn(pg_server: PgServer) -> None:
    """See :func:`check_withdraw_takes_only_untouched`."""
    tracker, _, leases = await _rail(3)
    try:
        await check_withdraw_takes_only_untouched(tracker, leases, idempotency_key="k9")
    finally:
        await tracker.aclose()
