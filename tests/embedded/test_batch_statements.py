"""What a worker's batches cost the embedded rail in statements and commits: a keyed
``claim_many`` reads the rail's key once, not once per lease; a ``finish_many`` and the claim
that follows it within a pass or two share one transaction (embedded/db.py ``run_write``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import Lease, TaskCreate
from tracker_client.rules.common import VALUES_ROWS, Ctx
from tracker_client.rules.statements import Statement, Statements

pytestmark = pytest.mark.anyio

PIPE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
DONE = {"trigger": "complete"}


async def _seeded(path: Path, n: int) -> EmbeddedTracker:
    # without claiming ahead: these tests pair a worker's reports with the claim it sends
    # (tests/embedded/test_claim_ahead.py has the claim riding with them)
    tracker = await EmbeddedTracker.open(str(path), claim_ahead="off")
    pid = await tracker.create_pipeline("p", PIPE)
    await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(n)])
    return tracker


async def test_a_keyed_claim_many_reads_the_rail_key_once(tmp_path: Path) -> None:
    tracker = await _seeded(tmp_path / "rail.db", 6)
    ran: list[str] = []
    try:
        await tracker.claim_many("w", "coder", 60_000, 1, idempotency_key="k0")  # makes the key
        tracker.engine.db.conn.set_trace_callback(ran.append)
        leases = await tracker.claim_many("w", "coder", 60_000, 5, idempotency_key="k")
        tracker.engine.db.conn.set_trace_callback(None)
        again = await tracker.claim_many("w", "coder", 60_000, 5, idempotency_key="k")
    finally:
        tracker.engine.db.conn.set_trace_callback(None)
        await tracker.aclose()
    assert len(leases) == 5
    assert len([s for s in ran if "FROM rail_secrets" in s]) == 1
    # the tokens are still derived from the key: a replay answers the same ones
    assert [x.lease_token.get_secret_value() for x in again] == [
        x.lease_token.get_secret_value() for x in leases
    ]


async def test_a_finish_many_and_the_next_claim_share_one_commit(
    tmp_path: Path, rail_logs_warnings_only: None
) -> None:
    """The claim sent a pass after the reports (as a worker's claimer sends it) joins the
    parked ``finish_many``: one BEGIN and one COMMIT for both, the reports written first (the
    claim takes the tasks they freed up no slot of), each caller its own answer, the reports'
    caller first."""
    tracker = await _seeded(tmp_path / "rail.db", 4)
    ran: list[str] = []
    order: list[str] = []
    try:
        first = await tracker.claim_many("w", "coder", 60_000, 2)
        db = tracker.engine.db
        db.conn.set_trace_callback(ran.append)
        done: list[object] = []
        claimed: list[Lease] = []

        async def report() -> None:
            done.extend(await tracker.finish_many([FinishItem(x, transition=DONE) for x in first]))
            order.append("reports")

        async def claim() -> None:
            await anyio.lowlevel.checkpoint()  # a pass later, as the claimer comes
            claimed.extend(await tracker.claim_many("w", "coder", 60_000, 5))
            order.append("claim")

        async with anyio.create_task_group() as tg:
            tg.start_soon(report)
            tg.start_soon(claim)
        db.conn.set_trace_callback(None)
        paired, alone = db.paired, db.alone
    finally:
        tracker.engine.db.conn.set_trace_callback(None)
        await tracker.aclose()
    assert all(isinstance(o, FinishResult) for o in done) and len(done) == 2
    assert len(claimed) == 2
    assert {x.task.id for x in claimed}.isdisjoint(x.task.id for x in first)
    assert (paired, alone) == (1, 0)
    assert ran.count("BEGIN IMMEDIATE") == 1 and ran.count("COMMIT") == 1
    writes = [s for s in ran if s.startswith(("UPDATE", "INSERT"))]
    assert writes[0].startswith("UPDATE tasks SET stage = 'done'")  # the reports first
    assert order == ["reports", "claim"]


async def test_a_finish_many_no_write_follows_goes_alone(tmp_path: Path) -> None:
    tracker = await _seeded(tmp_path / "rail.db", 2)
    try:
        leases = await tracker.claim_many("w", "coder", 60_000, 2)
        with anyio.fail_after(5):
            done = await tracker.finish_many([FinishItem(x, transition=DONE) for x in leases])
        paired, alone = tracker.engine.db.paired, tracker.engine.db.alone
        stages = [(await tracker.get_task(x.task.id)).stage for x in leases]
    finally:
        await tracker.aclose()
    assert all(isinstance(o, FinishResult) for o in done)
    assert (paired, alone) == (0, 1)
    assert stages == ["done", "done"]


async def test_a_read_or_a_close_sends_a_parked_write_on(tmp_path: Path) -> None:
    """A read arriving while a ``finish_many`` is parked goes after it (and sees it); closing
    the rail while one is parked writes it before the connection closes."""
    path = tmp_path / "rail.db"
    tracker = await _seeded(path, 4)
    try:
        leases = await tracker.claim_many("w", "coder", 60_000, 4)
        seen: list[str] = []

        async def read() -> None:
            seen.append((await tracker.get_task(leases[0].task.id)).stage)

        async with anyio.create_task_group() as tg:
            tg.start_soon(tracker.finish_many, [FinishItem(leases[0], transition=DONE)])
            tg.start_soon(read)
        assert seen == ["done"]
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(tracker.finish_many, [FinishItem(leases[1], transition=DONE)])
                await anyio.lowlevel.checkpoint()  # parked now
                await tracker.aclose()
    finally:
        await tracker.aclose()
    reopened = await EmbeddedTracker.open(str(path))
    try:
        stages = [(await reopened.get_task(x.task.id)).stage for x in leases[:2]]
    finally:
        await reopened.aclose()
    assert stages == ["done", "done"]


def _unmarked(statements: Statements, *names: str) -> Statements:
    """``statements`` with ``names``' hints ``many`` and ``values`` dropped (as another
    engine's would be)."""
    out = dict(statements)
    for name in names:
        hints = {k: v for k, v in statements[name].hints.items() if k not in ("many", "values")}
        out[name] = Statement(str(statements[name]), name, hints)
    return Statements(out, "sqlite")


async def test_a_statement_run_for_many_rows_writes_and_counts_as_one_by_one(
    tmp_path: Path,
) -> None:
    """``Ctx.many``: a statement the engine marks ``many`` runs for all the rows in one
    ``executemany`` (an insert marked ``values``: one statement of a ``VALUES`` row each),
    one it does not mark once per row; both write the same rows in the same order and answer
    how many rows changed (a row matching nothing counts 0)."""
    tracker = await _seeded(tmp_path / "rail.db", 3)
    marked = tracker.engine.statements
    assert marked["common.add_event"].hint("many") is not None
    assert marked["common.add_event"].hint("values") is not None
    plain = _unmarked(marked, "common.add_event", "runs.move_held")
    try:
        seqs = [s for (s,) in tracker.engine.db.conn.execute("SELECT seq FROM tasks ORDER BY seq")]
        ids = [i for (i,) in tracker.engine.db.conn.execute("SELECT id FROM tasks ORDER BY seq")]

        def write(sql: Statements, tag: str) -> Callable[[Ctx], tuple[int, int]]:
            def op(ctx: Ctx) -> tuple[int, int]:
                ctx.sql = sql
                rows = [
                    (task_id, None, ctx.now, tag, f'{{"n":{n}}}') for n, task_id in enumerate(ids)
                ]
                added = ctx.many("common.add_event", rows)
                # a guarded move of rows whose lease is not as named: none changes
                moved = ctx.many(
                    "runs.move_held",
                    [
                        ("done", ctx.now, None, 1, seq, "no-run", "x", 0, "todo", 1, None)
                        for seq in seqs
                    ],
                )
                assert ctx.many("common.add_event", []) == 0  # nothing to run
                return added, moved

            return op

        got_marked = await tracker._write("test", write(marked, "marked"))
        got_plain = await tracker._write("test", write(plain, "plain"))
        rows = tracker.engine.db.conn.execute(
            "SELECT kind, task_id, data FROM events WHERE kind IN ('marked', 'plain') ORDER BY id"
        ).fetchall()
    finally:
        await tracker.aclose()
    assert got_marked == got_plain == (3, 0)
    assert [r[1:] for r in rows[:3]] == [r[1:] for r in rows[3:]]
    assert [r[0] for r in rows] == ["marked"] * 3 + ["plain"] * 3
    assert [r[2] for r in rows[:3]] == ['{"n":0}', '{"n":1}', '{"n":2}']


@pytest.mark.usefixtures("rail_logs_warnings_only")  # one INSERT only where no INFO line per task
async def test_a_batch_inserts_its_runs_and_events_with_one_statement_each(
    tmp_path: Path,
) -> None:
    """A ``claim_many`` inserts its runs, and a ``finish_many`` of plain moves the
    ``transition`` events, with one ``INSERT`` each for the batch (statement hint ``values``,
    ``Ctx.many``): one step of SQLite, one release of the GIL, instead of one per row. Every
    run and event is still written, the events in the items' order."""
    tracker = await _seeded(tmp_path / "rail.db", 5)
    ran: list[str] = []
    try:
        db = tracker.engine.db
        db.conn.set_trace_callback(ran.append)
        leases = await tracker.claim_many("w", "coder", 60_000, 5)
        done = await tracker.finish_many([FinishItem(x, transition=DONE) for x in leases])
        db.conn.set_trace_callback(None)
        runs = db.conn.execute("SELECT id, status FROM runs ORDER BY id").fetchall()
        events = db.conn.execute(
            "SELECT run_id, kind FROM events WHERE kind = 'transition' ORDER BY id"
        ).fetchall()
    finally:
        tracker.engine.db.conn.set_trace_callback(None)
        await tracker.aclose()
    assert len(leases) == 5 and all(isinstance(o, FinishResult) for o in done)
    assert len([s for s in ran if s.startswith("INSERT INTO runs")]) == 1
    assert len([s for s in ran if s.startswith("INSERT INTO events")]) == 1
    assert sorted(r[0] for r in runs) == sorted(x.run_id for x in leases)
    assert {r[1] for r in runs} == {"completed"}
    assert [e[0] for e in events] == [x.run_id for x in leases]


async def test_a_values_statement_of_many_rows_goes_in_chunks(tmp_path: Path) -> None:
    """More rows than one ``VALUES`` statement takes (:data:`~.common.VALUES_ROWS`) go in
    several, all of them written, in order, and counted."""
    tracker = await _seeded(tmp_path / "rail.db", 1)
    n = VALUES_ROWS * 2 + 7
    try:
        (task_id,) = tracker.engine.db.conn.execute("SELECT id FROM tasks").fetchone()

        def op(ctx: Ctx) -> int:
            rows = [(task_id, None, ctx.now, "bulk", f'{{"n":{i}}}') for i in range(n)]
            return ctx.many("common.add_event", rows)

        added = await tracker._write("test", op)
        data = [
            d
            for (d,) in tracker.engine.db.conn.execute(
                "SELECT data FROM events WHERE kind = 'bulk' ORDER BY id"
            )
        ]
    finally:
        await tracker.aclose()
    assert added == n
    assert data == [f'{{"n":{i}}}' for i in range(n)]
