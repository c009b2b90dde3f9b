"""Claiming ahead on the embedded rail (``tracker_client/ahead.py``, the tracker's
``claim_ahead`` option).

While one agent drains a role with keyless ``claim_many`` calls (a worker's, whose answers
cannot be lost), a ``finish_many`` of its runs also claims its batch after next in the same
commit; its next ``claim_many`` is answered from those leases with no write, so its runs start
while the database thread writes. A kept lease is a real lease; an unused one is released,
uncounted, when the rail closes, when it waits too long, or when another agent or TTL is asked
for; a parked claim takes them at once; keyed callers (a served rail's clients) are never
claimed ahead for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.contract.support import (
    check_stale_kept_leases_are_withdrawn,
    check_withdraw_takes_only_untouched,
    check_withdrawn_without_a_trace,
)
from tests.embedded.test_batch_statements import DONE, PIPE
from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import ConfigError
from tracker_client.models import Lease, TaskCreate

pytestmark = pytest.mark.anyio


async def _rail(path: Path, tasks: int, **options: Any) -> tuple[EmbeddedTracker, list[Lease]]:
    """A rail of ``tasks`` tasks and a first keyless batch of 3 leased (the agent drains)."""
    tracker = await EmbeddedTracker.open(str(path), **options)
    pid = await tracker.create_pipeline("p", PIPE)
    await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(tasks)])
    return tracker, await tracker.claim_many("a", "coder", 60_000, 3)


def _items(leases: list[Lease]) -> list[FinishItem]:
    return [FinishItem(x, transition=DONE) for x in leases]


def _leased(tracker: EmbeddedTracker) -> set[str]:
    """Ids of the tasks under a live lease now (read from the rows)."""
    rows = tracker.engine.db.conn.execute("SELECT id FROM tasks WHERE lease_expires_at_ms > 0")
    return {str(row[0]) for row in rows}


async def test_the_next_batch_rides_with_the_reports_and_is_answered_without_a_write(
    tmp_path: Path,
) -> None:
    tracker, leases = await _rail(tmp_path / "rail.db", 9)
    ran: list[str] = []
    db = tracker.engine.db
    try:
        db.conn.set_trace_callback(ran.append)
        finished = await tracker.finish_many(_items(leases))
        kept = _leased(tracker)
        reported = list(ran)
        ran.clear()
        nxt = await tracker.claim_many("a", "coder", 60_000, 3)
        db.conn.set_trace_callback(None)
        # a kept lease is a real lease: its report is written under its token
        done = await tracker.finish_many(_items(nxt))
    finally:
        db.conn.set_trace_callback(None)
        await tracker.aclose()
    assert all(isinstance(o, FinishResult) for o in finished)
    # one commit: the reports, then a claim of the next batches (3, what was asked last,
    # and 3 more: the last claim found none kept, so one batch is kept while the other runs)
    assert reported.count("BEGIN IMMEDIATE") == 1 and reported.count("COMMIT") == 1
    assert any(s.startswith("INSERT INTO runs") for s in reported)
    assert len(kept) == 6 and kept.isdisjoint(x.task.id for x in leases)
    # answered from the kept leases: no write at all
    assert "BEGIN IMMEDIATE" not in ran
    assert len(nxt) == 3 and {x.task.id for x in nxt} <= kept
    assert all(isinstance(o, FinishResult) for o in done)


async def test_reports_and_their_claim_ahead_are_handed_over_at_once_as_one_job(
    tmp_path: Path,
) -> None:
    """The reports and the claim riding with them go to the database thread together, in
    the call itself: the reports do not park waiting for a claim to join them (a scheduling
    pass or two of the loop), and both answers come back with one wake-up."""
    tracker, leases = await _rail(tmp_path / "rail.db", 9)
    db = tracker.engine.db
    try:
        with anyio.fail_after(5):
            finished = await tracker.finish_many(_items(leases))
        kept = _leased(tracker)
        paired, alone = db.paired, db.alone
    finally:
        await tracker.aclose()
    assert all(isinstance(o, FinishResult) for o in finished)
    assert len(kept) == 6
    # nothing parked: neither taken along by the claim nor sent on alone after waiting
    assert (paired, alone) == (0, 0)


async def test_reports_sent_while_a_claim_ahead_is_in_flight_do_not_park(
    tmp_path: Path,
) -> None:
    """Reports sent while the claim ahead riding with earlier reports is in flight go at
    once: that claim was handed over with its own reports, and no claim of the worker comes
    to take them along (its claims are answered from the kept leases)."""
    tracker, leases = await _rail(tmp_path / "rail.db", 12)
    db = tracker.engine.db
    more = await tracker.claim_many("a", "coder", 60_000, 3)
    outcomes: list[Any] = []
    try:

        async def report(batch: list[Lease]) -> None:
            outcomes.extend(await tracker.finish_many(_items(batch)))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(report, leases)  # carries the claim ahead
                tg.start_soon(report, more)  # sent while it is in flight
        paired, alone = db.paired, db.alone
    finally:
        await tracker.aclose()
    assert len(outcomes) == 6 and all(isinstance(o, FinishResult) for o in outcomes)
    assert (paired, alone) == (0, 0)


async def test_closing_the_rail_withdraws_the_kept_leases_without_a_trace(
    tmp_path: Path,
) -> None:
    """A lease no claim took is withdrawn: no run of it stays, nothing is counted, and the
    task's next run is its first attempt (an executor never sees attempt 2 of a task whose
    attempt 1 never ran)."""
    path = tmp_path / "rail.db"
    tracker, leases = await _rail(path, 9)
    await tracker.finish_many(_items(leases))
    kept = _leased(tracker)
    assert len(kept) == 6
    await tracker.aclose()
    other = await EmbeddedTracker.open(str(path))
    try:
        await check_withdrawn_without_a_trace(other, kept, idempotency_key="b1")
    finally:
        await other.aclose()


async def test_a_kept_lease_that_waits_too_long_is_withdrawn_and_work_claimed_fresh(
    tmp_path: Path,
) -> None:
    tracker, leases = await _rail(tmp_path / "rail.db", 12)
    try:
        await tracker.finish_many(_items(leases))
        kept = _leased(tracker)
        await check_stale_kept_leases_are_withdrawn(tracker, kept)
    finally:
        await tracker.aclose()


async def test_a_lease_that_moved_on_is_not_withdrawn(tmp_path: Path) -> None:
    """Withdrawing checks the lease is still as claimed: one cancelled meanwhile stays as
    the cancel left it."""
    tracker, leases = await _rail(tmp_path / "rail.db", 9)
    try:
        await tracker.finish_many(_items(leases))
        kept = sorted(_leased(tracker))
        await tracker.cancel(kept[0])
        tracker._ahead.max_age_s = 0.0
        await tracker.claim_many("a", "coder", 60_000, 3)
        runs = await tracker.list_runs(kept[0])
        assert [r.status for r in runs] == ["cancelled"]
        assert (await tracker.get_task(kept[0])).dead_letter_reason is not None
    finally:
        await tracker.aclose()


@pytest.mark.parametrize(
    ("agent", "ttl_ms"), [("b", 60_000), ("a", 30_000)], ids=["another agent", "another ttl"]
)
async def test_another_agent_or_ttl_stops_claiming_ahead_and_gets_the_kept_work(
    agent: str, ttl_ms: int, tmp_path: Path
) -> None:
    tracker, leases = await _rail(tmp_path / "rail.db", 6)
    try:
        await tracker.finish_many(_items(leases))
        kept = _leased(tracker)
        got = await tracker.claim_many(agent, "coder", ttl_ms, 3)
        assert {x.task.id for x in got} == kept  # released, then claimed afresh
        assert got[0].run.agent_id == agent
        await tracker.finish_many(_items(got))
        assert _leased(tracker) == set()  # never again on this instance
    finally:
        await tracker.aclose()


async def test_a_parked_claim_takes_the_kept_leases_without_a_write(tmp_path: Path) -> None:
    """A worker's last reports may claim its next batch after its claim found nothing: its
    idle claim takes them at once instead of leaving them to lapse."""
    tracker, leases = await _rail(tmp_path / "rail.db", 6)
    ran: list[str] = []
    db = tracker.engine.db
    try:
        await tracker.finish_many(_items(leases))
        kept = _leased(tracker)
        db.conn.set_trace_callback(ran.append)
        with anyio.fail_after(5):
            got = await tracker.parked_claim(
                "a", "coder", 60_000, 3, 30_000, idempotency_key="park-1"
            )
        db.conn.set_trace_callback(None)
    finally:
        db.conn.set_trace_callback(None)
        await tracker.aclose()
    assert {x.task.id for x in got} == kept and len(kept) == 3
    assert "BEGIN IMMEDIATE" not in ran


async def test_a_release_stops_claiming_ahead_until_the_agent_claims_again(
    tmp_path: Path,
) -> None:
    """A stopping worker gives its runs back: its last reports must not lease those tasks
    (nor others) again for it."""
    tracker, leases = await _rail(tmp_path / "rail.db", 9)
    try:
        await tracker.release(leases[0], "worker_shutdown")
        await tracker.finish_many(_items(leases[1:]))
        assert _leased(tracker) == set()
        again = await tracker.claim_many("a", "coder", 60_000, 3)
        await tracker.finish_many(_items(again))
        assert _leased(tracker)  # claiming again: its reports claim ahead again
    finally:
        await tracker.aclose()


async def test_keyed_claims_are_never_claimed_ahead_for(tmp_path: Path) -> None:
    """A caller whose answers can be lost keys its claims (a served rail's client): its
    reports claim nothing for it."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(6)])
        leases = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="k1")
        await tracker.finish_many(_items(leases))
        assert _leased(tracker) == set()
    finally:
        await tracker.aclose()


@pytest.mark.parametrize("off", ["off", False])
async def test_claim_ahead_off_claims_nothing_ahead(off: object, tmp_path: Path) -> None:
    tracker, leases = await _rail(tmp_path / "rail.db", 9, claim_ahead=off)
    try:
        await tracker.finish_many(_items(leases))
        assert _leased(tracker) == set()
    finally:
        await tracker.aclose()


@pytest.mark.parametrize("value", ["maybe", "", "1"])
async def test_a_bad_claim_ahead_value_is_refused_by_name(value: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="claim_ahead: expected on or off"):
        await EmbeddedTracker.open(str(tmp_path / "rail.db"), claim_ahead=value)
    assert not (tmp_path / "rail.db").exists()


async def test_a_lease_a_run_has_used_is_never_withdrawn(tmp_path: Path) -> None:
    """See :func:`check_withdraw_takes_only_untouched`."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"), claim_ahead=False)
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(3)])
        await check_withdraw_takes_only_untouched(
            tracker, await tracker.claim_many("a", "coder", 60_000, 3)
        )
    finally:
        await tracker.aclose()
