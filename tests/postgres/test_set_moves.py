"""A batch's plain moves in one statement, and the rail's wake-up left out for its own writer
(schema 20, ``tracker_client/postgres/schema/0020_set_moves.sql``; docs/benchmarks/postgresql.md).

``bw_finish_many_tx`` called ``bw_move`` once per item, six statements each; ``bw_moves`` writes
the whole batch in one statement and must answer what the loop answered, or FALSE for an item
(nothing written for it: the caller takes it the rail's way). These tests call the functions a
worker's statements call, on a rail a real tracker made and leased.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.contract.support import make_pipeline, new_task, simple_pipeline
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tracker_client.factory import open_tracker
from tracker_client.models import Lease

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _quiet(quiet_tracker_log: None) -> None:
    """The tracker's one-trip paths step aside at INFO."""


async def _leased(n: int) -> tuple[str, str, list[Lease]]:
    """A fresh rail with ``n`` tasks, each leased by a real tracker: (server URL with the
    schema on its search path, pipeline id@version, the leases)."""
    key = f"moves-{uuid.uuid4()}"
    tracker = await open_tracker(fresh_schema_url(key))
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(n)])
        leases = await tracker.claim_many("agent-1", "coder", 60_000, n)
    finally:
        await tracker.aclose()
    assert len(leases) == n
    url = fresh_schema_url(key).split("?")[0]
    conninfo = f"{url}?options=-csearch_path%3D{schema_name(key)}"
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SELECT version FROM pipelines WHERE id = %s", (pid,)).fetchone()
    assert row is not None
    return conninfo, f"{pid}@{row[0]}", leases


def _item(lease: Lease, pipeline: str, key: str | None, token: str | None = None) -> dict[str, Any]:
    digest = hashlib.sha256(lease.lease_token.get_secret_value().encode()).hexdigest()
    return {
        "run": lease.run_id,
        "token": token or digest,
        "pipeline": pipeline,
        "stage": lease.task.stage,
        "version": None,
        "to": "done",
        "role": None,
        "terminal": 1,
        "usage": None,
        "event": f'{{"run":"{lease.run_id}"}}',
        "key": key,
        "fp": "fp",
        "result": f'{{"key":"{key}"}}',
    }


async def test_a_batch_is_answered_per_item_as_the_loop_answered_it() -> None:
    conninfo, pipeline, (a, b, c, d, e) = await _leased(5)
    now = int(time.time() * 1000)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO idempotency VALUES ('replayed', 'finish', 'fp', '{}', %s)", (now,)
        )
        items = [
            _item(a, pipeline, "ka"),  # written
            _item(b, pipeline, "kb", token="0" * 64),  # another token: refused
            _item(a, pipeline, "ka2"),  # a's run again: its lease is gone once a is written
            _item(c, pipeline, "replayed"),  # a key already recorded
            _item(d, pipeline, "ka"),  # the key of an earlier item of the batch
            _item(e, pipeline, None),  # no key: written
            # b's run again, its own token now: the loop wrote it (the earlier item was
            # refused); answered FALSE, its caller takes it the rail's way, which writes it
            _item(b, pipeline, "kb"),
        ]
        row = conn.execute(
            "SELECT bw_finish_many_tx('lock', NULL, NULL, 'i', %s, %s::jsonb)",
            (now, Jsonb(items)),
        ).fetchone()
        assert row is not None and row[0] == [True, False, False, False, False, True, False]
        tasks = dict(conn.execute("SELECT id, stage || ':' || terminal FROM tasks").fetchall())
        assert tasks == {
            a.task.id: "done:1",
            b.task.id: f"{b.task.stage}:0",
            e.task.id: "done:1",
            c.task.id: f"{c.task.stage}:0",
            d.task.id: f"{d.task.stage}:0",
        }
        leases = conn.execute(
            "SELECT id FROM tasks WHERE lease_expires_at_ms > 0 OR lease_id IS NOT NULL"
        ).fetchall()
        assert sorted(r[0] for r in leases) == sorted([b.task.id, c.task.id, d.task.id])
        runs = dict(conn.execute("SELECT id, status FROM runs").fetchall())
        assert runs == {
            a.run_id: "completed",
            b.run_id: "running",
            e.run_id: "completed",
            c.run_id: "running",
            d.run_id: "running",
        }
        # one transition event per move, in the items' order, with the item's own text
        events = conn.execute(
            "SELECT task_id, run_id, ts_ms, data FROM events WHERE kind = 'transition' ORDER BY id"
        ).fetchall()
        assert events == [
            (a.task.id, a.run_id, now, f'{{"run":"{a.run_id}"}}'),
            (e.task.id, e.run_id, now, f'{{"run":"{e.run_id}"}}'),
        ]
        kept = conn.execute(
            "SELECT key, operation, result FROM idempotency ORDER BY key"
        ).fetchall()
        assert kept == [("ka", "finish", '{"key":"ka"}'), ("replayed", "finish", "{}")]
        # an empty batch answers an empty list, as the loop did
        row = conn.execute(
            "SELECT bw_finish_many_tx('lock', NULL, NULL, 'i', %s, '[]'::jsonb)", (now,)
        ).fetchone()
        assert row is not None and row[0] == []


async def test_a_lapsed_lease_or_a_stale_task_version_is_not_moved() -> None:
    conninfo, pipeline, (a, b, c) = await _leased(3)
    now = int(time.time() * 1000)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        stale = {**_item(b, pipeline, "kb"), "version": b.task.task_version + 1}
        other = {**_item(c, pipeline, "kc"), "pipeline": pipeline.split("@")[0] + "@999"}
        row = conn.execute(
            "SELECT bw_finish_many_tx('lock', NULL, NULL, 'i', %s, %s::jsonb)",
            # a's lease lapsed by then; b's version moved on; c's pipeline version is not it
            (now + 120_000, Jsonb([_item(a, pipeline, "ka")])),
        ).fetchone()
        assert row is not None and row[0] == [False]
        row = conn.execute(
            "SELECT bw_finish_many_tx('lock', NULL, NULL, 'i', %s, %s::jsonb)",
            (now, Jsonb([stale, other])),
        ).fetchone()
        assert row is not None and row[0] == [False, False]
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM idempotency").fetchone() == (0,)


def _notified(pg_server: PgServer, conninfo: str, waiter: str | None) -> list[str]:
    """The payloads a listener gets from one finish of the writer instance ``w1`` while
    ``waiter`` has a live ``waiters`` row (None: no row)."""
    with (
        psycopg.connect(conninfo, autocommit=True) as listen,
        psycopg.connect(conninfo, autocommit=True) as conn,
    ):
        listen.execute('LISTEN "rail_chan"')
        conn.execute("DELETE FROM waiters")
        if waiter is not None:
            conn.execute(
                "INSERT INTO waiters VALUES (%s, clock_timestamp() + interval '1 minute')",
                (waiter,),
            )
        conn.execute(
            "SELECT bw_finish_many_tx('lock', 'rail_chan', NULL, 'w1', %s, '[]'::jsonb)",
            (int(time.time() * 1000),),
        )
        conn.execute("SELECT 1")  # a round trip after the commit: the NOTIFY has gone out
        return [n.payload for n in listen.notifies(timeout=0.5, stop_after=1)]


async def test_the_rail_channel_is_notified_only_for_another_instance_waiting(
    pg_server: PgServer,
) -> None:
    """An instance ignores its own notifications (its write woke its waiters in process,
    ``tracker_client/postgres/wake.py``): a writer whose own row is the only live one sends
    none; another instance's row still gets one."""
    conninfo, _, _ = await _leased(1)
    assert _notified(pg_server, conninfo, None) == []
    assert _notified(pg_server, conninfo, "w1") == []
    assert _notified(pg_server, conninfo, "w2") == ["w1"]
