"""A ``finish_many`` and a claim ready together: one statement, against a real server.

``tracker_client/postgres/pairing.py``: a worker's reports and its claim for the slots they
freed go as ONE statement (one transaction, one commit) when they come within a few scheduling
passes of each other; each still gets its own answer, a pair that declines is answered as two
calls, and a lost answer reaches both callers, whose retries under their keys write nothing
twice.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from tests.postgres.batch_rail import finish_items, leased_rail, pair_answer_lost
from tests.postgres.server import PgServer
from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome, FinishResult
from tracker_client.errors import TrackerUnavailable
from tracker_client.models import Lease

# the one-trip paths only (see conftest's ``quiet_tracker_log``)
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quiet_tracker_log"),
]


async def _rail(tasks: int) -> tuple[Any, list[Lease]]:
    # claim_ahead=off: the pairing alone (claiming ahead rides on it: test_claim_ahead.py)
    key = f"pair-{uuid.uuid4()}"
    tracker, _, leases = await leased_rail(key, tasks, "first", claim_ahead="off")
    return tracker, leases


async def _together(
    tracker: Any, items: list[FinishItem], claim_key: str
) -> tuple[list[FinishManyOutcome], list[Lease]]:
    """``finish_many(items)`` and then, a scheduling pass later, a claim of 3 under
    ``claim_key``, as a worker's reports and its next claim come."""
    out: dict[str, Any] = {}

    async def reports() -> None:
        out["finished"] = await tracker.finish_many(items)

    async def claim() -> None:
        await anyio.lowlevel.checkpoint()
        out["claimed"] = await tracker.claim_many(
            "a", "coder", 60_000, 3, idempotency_key=claim_key
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(reports)
        tg.start_soon(claim)
    return out["finished"], out["claimed"]


async def test_reports_and_the_next_claim_go_as_one_statement(
    pg_server: PgServer, sent_queries: list[str]
) -> None:
    tracker, leases = await _rail(6)
    try:
        sent_queries.clear()
        finished, claimed = await _together(tracker, finish_items(leases, "f"), "second")
        assert len(sent_queries) == 1 and "bw_finish_claim_tx" in sent_queries[0]
        assert tracker.engine.pairs.paired == 1
        # each caller got its own answer, as alone
        assert [
            o.transition.new_stage for o in finished if isinstance(o, FinishResult) and o.transition
        ] == ["done"] * 3
        assert len(claimed) == 3
        assert {x.task.id for x in claimed}.isdisjoint(x.task.id for x in leases)
        for lease in leases:
            assert (await tracker.get_task(lease.task.id)).stage == "done"
        for lease in claimed:
            detail = await tracker.get_task(lease.task.id)
            assert detail.latest_run is not None and detail.latest_run.status == "running"
            await tracker.heartbeat(lease)  # a live lease under its token
        # replays under the keys answer what the pair wrote, writing nothing more
        assert await tracker.finish_many(finish_items(leases, "f")) == finished
        again = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="second")
        assert [x.run.id for x in again] == [x.run.id for x in claimed]
    finally:
        await tracker.aclose()


async def test_a_claim_that_finds_nothing_still_answers_the_reports(
    pg_server: PgServer, sent_queries: list[str]
) -> None:
    tracker, leases = await _rail(3)
    try:
        sent_queries.clear()
        finished, claimed = await _together(tracker, finish_items(leases, "f"), "second")
        assert len(sent_queries) == 1
        assert claimed == []
        assert all(isinstance(o, FinishResult) for o in finished)
        for lease in leases:
            assert (await tracker.get_task(lease.task.id)).stage == "done"
    finally:
        await tracker.aclose()


async def test_a_pair_that_declines_is_answered_as_two_calls(
    pg_server: PgServer, sent_queries: list[str]
) -> None:
    tracker, leases = await _rail(6)
    try:
        # the claim replays the first claim's key: its statement declines (BW001), and the
        # whole pair with it; then each call goes alone and is answered exactly
        sent_queries.clear()
        finished, claimed = await _together(tracker, finish_items(leases, "f"), "first")
        assert tracker.engine.pairs.split == 1 and tracker.engine.pairs.paired == 0
        assert "bw_finish_claim_tx" in sent_queries[0]
        assert all(isinstance(o, FinishResult) for o in finished)
        # the replay answers the first claim's leases, less those the reports (sent alone
        # beside it) finished first: never a new one
        assert {x.run.id for x in claimed} <= {x.run.id for x in leases}
        for lease in leases:
            detail = await tracker.get_task(lease.task.id)
            assert detail.stage == "done" and detail.task_version == 2
    finally:
        await tracker.aclose()


async def test_a_lost_pair_answer_reaches_both_callers_and_retries_write_once(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracker, leases = await _rail(6)
    db = tracker.engine.db
    real = db.one_call

    try:
        monkeypatch.setattr(db, "one_call", pair_answer_lost(real))
        errors: list[BaseException] = []

        async def reports() -> None:
            try:
                await tracker.finish_many(finish_items(leases, "f"))
            except TrackerUnavailable as exc:
                errors.append(exc)

        async def claim() -> None:
            await anyio.lowlevel.checkpoint()
            try:
                await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="second")
            except TrackerUnavailable as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(reports)
            tg.start_soon(claim)
        assert len(errors) == 2
        monkeypatch.setattr(db, "one_call", real)
        # the retries under the same keys: answered from the records, nothing written twice
        finished = await tracker.finish_many(finish_items(leases, "f"))
        assert all(isinstance(o, FinishResult) for o in finished)
        claimed = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="second")
        assert len(claimed) == 3
        for lease in leases:
            runs = await tracker.list_runs(lease.task.id)
            assert [r.status for r in runs] == ["completed"]
        for lease in claimed:
            assert len(await tracker.list_runs(lease.task.id)) == 1
            await tracker.heartbeat(lease)
    finally:
        await tracker.aclose()


async def test_a_claim_alone_is_not_held_back(pg_server: PgServer, sent_queries: list[str]) -> None:
    tracker, _ = await _rail(6)
    try:
        sent_queries.clear()
        claimed = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key="second")
        assert len(claimed) == 3
        assert len(sent_queries) == 1 and "bw_claim_tx" in sent_queries[0]
        assert tracker.engine.pairs.paired == 0
    finally:
        await tracker.aclose()
