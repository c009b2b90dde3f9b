"""The functions a PostgreSQL worker's hot statements call plan each of their statements once per
connection, and those generic plans read through indexes (schema 19,
``tracker_client/postgres/schema/0019_generic_plans.sql``; docs/benchmarks/postgresql.md).

plpgsql keeps a statement's plan, but it compares the cached generic plan with one made for each
call's values and plans anew while that custom one looks cheaper: the finish's row look-up, the
claim's candidates and its housekeeping check were planned at every call, about half the
server's CPU per task. A server of its own here loads ``pg_stat_statements`` (nested statements
and their planning counted), a real tracker claims and finishes in batches, and each of those
statements must show at most one plan per connection. Then, on the same rail with finished
tasks kept, every plan those functions run (``auto_explain``, nested statements) must reach its
rows through an index: a generic plan is made without the call's values, so a statement whose
text does not imply a partial index's predicate would scan every task kept.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.contract.support import finish_all, make_pipeline, new_task, simple_pipeline
from tests.postgres.server import PgServer, stats_server
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: The hot functions' own statements that plpgsql planned at every call before schema 19
#: (a fragment of each one's text as pg_stat_statements shows it). Since schema 20 a batch's
#: moves, the finish's row look-up included, are one statement (bw_moves).
REPLANNED = {
    "the finish's moves": "FROM ROWS FROM (jsonb_to_recordset(p_items)",
    "the claim's candidates": "SELECT t.seq, t.concurrency_key IS NOT NULL",
    "the claim's housekeeping check": "lease_expires_at_ms <= p_now",
}
#: The tables that grow with the work kept: no plan may scan them.
KEPT_TABLES = ("tasks", "runs", "events", "idempotency")
#: A pipeline's tasks, every one kept: no hot plan may reach a task through them.
PIPELINE_SCAN = r"Index (?:Only )?Scan using tasks_pipeline\b"


@pytest.fixture(name="stats_server", scope="module")
def _stats_server() -> Iterator[PgServer]:
    """A server of this module's own counting nested statements and their planning (stopped
    by pid and removed after it)."""
    with stats_server("pg_stat_statements.track_planning=on", needs=("auto_explain",)) as server:
        yield server


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    """The tracker logger at WARNING: the one-statement paths step aside at INFO."""
    caplog.set_level(logging.WARNING, logger="backlog_worker.tracker")


async def _drain(url: str, tasks: int) -> None:
    """``tasks`` tasks created, then claimed and finished ten at a time by a real tracker."""
    tracker = await open_tracker(url)
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(tasks)])
        await finish_all(tracker)
    finally:
        await tracker.aclose()


async def test_the_hot_statements_are_planned_once_per_connection(
    stats_server: PgServer,
) -> None:
    schema = f"gp_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stats_server.url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    await _drain(f"{stats_server.url}?schema={schema}", 100)
    with psycopg.connect(stats_server.url, autocommit=True) as conn:
        rows = conn.execute("SELECT query, calls, plans FROM pg_stat_statements").fetchall()
    counts: dict[str, tuple[int, int]] = {}
    for what, fragment in REPLANNED.items():
        found = [(int(c), int(p)) for q, c, p in rows if fragment in str(q)]
        counts[what] = (sum(c for c, _ in found), sum(p for _, p in found))
    # 100 finishes and 11 claims: one plan per connection of the tracker's (a handful), not
    # one per call
    assert {what: calls >= 10 for what, (calls, _) in counts.items()} == dict.fromkeys(
        REPLANNED, True
    ), counts
    assert {what: plans <= 6 for what, (_, plans) in counts.items()} == dict.fromkeys(
        REPLANNED, True
    ), counts


def _hex(n: int) -> str:
    return "{" + ",".join(str(uuid.uuid4()) for _ in range(n)) + "}"


@pytest.mark.parametrize("analyzed", [True, False], ids=["analyzed", "never-analyzed"])
async def test_the_generic_plans_read_through_indexes_with_work_kept(
    stats_server: PgServer, analyzed: bool
) -> None:
    """Never analyzed: the tables' statistics when a worker's first batch comes within seconds
    of the submit (autovacuum has not passed yet), which its connections' plans keep for their
    life. A task is then reached through its key, never through a scan of its pipeline's
    tasks (schema 22: bw_grant's hash join over every task, bw_moves' probe of
    tasks_pipeline)."""
    schema = f"gp_{uuid.uuid4().hex[:12]}"
    url = f"{stats_server.url}?schema={schema}"
    await _drain(url, 1500)  # finished work kept
    tracker = await open_tracker(url)
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_tasks([new_task(pid, f"w{i}") for i in range(20)])
    finally:
        await tracker.aclose()
    plans: list[str] = []
    with psycopg.connect(stats_server.url, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
        if analyzed:
            conn.execute(f"ANALYZE {schema}.tasks")
            conn.execute(f"ANALYZE {schema}.runs")
        conn.execute(f"SET search_path TO {schema}")
        conn.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_level = notice",
            "client_min_messages = notice",
        ):
            conn.execute(f"SET {setting}")
        now = int(time.time() * 1000)
        runs = [str(uuid.uuid4()) for _ in range(10)]
        digests = [hashlib.sha256(r.encode()).hexdigest() for r in runs]
        leased = conn.execute(
            "SELECT id, pipeline_id, stage, task_version, lease_run_id FROM bw_claim_tx("
            "'lock', NULL, NULL, 'i', 'claim_many', 'coder', 'a', %s, 60000, %s, %s, %s,"
            " NULL, NULL)",
            (now, "{" + ",".join(runs) + "}", _hex(10), "{" + ",".join(digests) + "}"),
        ).fetchall()
        assert len(leased) == 10
        version = conn.execute("SELECT version FROM pipelines WHERE id = %s", (pid,)).fetchone()
        assert version is not None
        items = [
            {
                "run": run,
                "token": digests[runs.index(run)],
                "pipeline": f"{pipeline}@{version[0]}",
                "stage": stage,
                "version": task_version,
                "to": "done",
                "role": None,
                "terminal": 1,
                "usage": None,
                "event": "{}",
                "key": f"k-{run}",
                "fp": "fp",
                "result": "{}",
            }
            for _, pipeline, stage, task_version, run in leased
        ]
        done = conn.execute(
            "SELECT bw_finish_many_tx('lock', NULL, NULL, 'i', %s, %s::jsonb)",
            (now, Jsonb(items)),
        ).fetchone()
        assert done is not None and done[0] == [True] * 10
    scans = [
        f"{m.group(0)}\n{plan}"
        for plan in plans
        if (m := re.search(rf"Seq Scan on ({'|'.join(KEPT_TABLES)})\b|{PIPELINE_SCAN}", plan))
    ]
    assert plans and scans == []


#: The statements of a create's one round trip that the server planned at every create, as
#: pg_stat_statements shows them (sent plain or prepared).
CREATE_TRIP = {
    "the insert": "INSERT INTO tasks (id, pipeline_id, stage, title",
    "the write lock": "pg_advisory_xact_lock(hashtextextended(",
    "the follow channel's notify": "FROM followers WHERE expires_at > clock_timestamp()",
}


async def test_a_create_trip_is_planned_once_per_connection(stats_server: PgServer) -> None:
    """A create's one round trip sends its insert, its write lock and its follow-channel
    notify as ``EXECUTE`` of statements prepared once per connection (``tasks.insert``'s
    ``prepared`` hint, :class:`~tracker_client.postgres.dialect.Prepared`; no schema change),
    not as text the server plans at every create: plain, these 65 inserts were 65 plans."""
    schema = f"gp_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stats_server.url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    tracker = await open_tracker(f"{stats_server.url}?schema={schema}")
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        made = [await tracker.create_task(new_task(pid, f"c{i}")) for i in range(60)]
        made += await tracker.create_tasks([new_task(pid, f"b{i}") for i in range(5)])
        listed = await tracker.list_tasks(limit=100)
    finally:
        await tracker.aclose()
    assert sorted(t.id for t in listed.items) == sorted(made)  # every create answered and kept
    with psycopg.connect(stats_server.url, autocommit=True) as conn:
        rows = conn.execute("SELECT query, calls, plans FROM pg_stat_statements").fetchall()
    counts: dict[str, tuple[int, int]] = {}
    for what, fragment in CREATE_TRIP.items():
        found = [(int(c), int(p)) for q, c, p in rows if fragment in str(q)]
        counts[what] = (sum(c for c, _ in found), sum(p for _, p in found))
    # 61 round trips (65 inserts) on the lane's few connections: PostgreSQL's plan cache
    # makes a custom plan for each of a prepared statement's first five runs, then keeps the
    # generic one; a write on the pool (the pipeline's, a first create) plans its own
    assert {what: calls >= 61 for what, (calls, _) in counts.items()} == dict.fromkeys(
        CREATE_TRIP, True
    ), counts
    assert {what: plans <= 14 for what, (_, plans) in counts.items()} == dict.fromkeys(
        CREATE_TRIP, True
    ), counts
