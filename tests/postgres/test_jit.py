"""The rail's statements run without JIT compilation (``jit = off`` on its connections).

PostgreSQL compiles a statement with LLVM when the planner costs it above ``jit_above_cost``
(100,000 by default). ``queue_stats``' read of the waiting tasks crossed it once the tasks were
analyzed as many (5,000 waiting): each call spent ~50-90 ms of the server's CPU compiling a
read that runs in ~4 ms, at every drain check of a ``--drain`` worker, every metrics refresh and
every ``backlog-worker queue`` (docs/benchmarks/postgresql.md). A server of this
module's own sets ``jit_above_cost = 0``, so every statement of a session with JIT on is
compiled, and loads ``pg_stat_statements`` to count what was: a real tracker's creates, claims,
finishes and queue stats once it is open, over its pooled connections and its async lane, with
and without PgBouncer's transaction mode (the settings travel with each ``BEGIN``), compile
nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.contract.support import finish_all, make_pipeline, new_task, simple_pipeline
from tests.postgres.server import PgServer, stats_server
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def jit_server() -> Iterator[PgServer]:
    """A server of this module's own compiling every statement a session lets it
    (``jit_above_cost`` 0), with ``pg_stat_statements`` counting what was compiled."""
    with stats_server("jit=on", "jit_above_cost=0") as server:
        with psycopg.connect(server.url, autocommit=True) as conn:
            available = conn.execute("SELECT pg_jit_available()").fetchone()
        if not (available and available[0]):
            pytest.skip("this PostgreSQL has no JIT (llvmjit): nothing to turn off")
        yield server


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    """The tracker logger at WARNING: the one-statement paths step aside at INFO."""
    caplog.set_level(logging.WARNING, logger="backlog_worker.tracker")


def _compiled(server: PgServer) -> list[tuple[str, int]]:
    """The statements JIT compiled since the last reset, with how many functions."""
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("SET jit = off")
        rows = conn.execute(
            "SELECT query, jit_functions FROM pg_stat_statements WHERE jit_functions > 0"
        ).fetchall()
    return [(str(q), int(n)) for q, n in rows]


@pytest.mark.parametrize("bouncer", [False, True], ids=["direct", "pgbouncer-mode"])
async def test_the_rails_statements_are_not_jit_compiled(
    jit_server: PgServer, bouncer: bool
) -> None:
    with psycopg.connect(jit_server.url, autocommit=True) as conn:
        conn.execute("SET jit = off")
        conn.execute("SELECT pg_stat_statements_reset()")
        # the server compiles what a session with JIT on sends (what the test stands on)
        conn.execute("SET jit = on")
        conn.execute("SELECT count(*) FROM pg_class")
    assert any("pg_class" in q for q, _ in _compiled(jit_server))
    url = f"{jit_server.url}?schema=jit_{uuid.uuid4().hex[:12]}"
    if bouncer:
        url += "&pgbouncer=transaction"
    tracker = await open_tracker(url)
    try:
        with psycopg.connect(jit_server.url, autocommit=True) as conn:  # the open's schema
            conn.execute("SET jit = off")  # check (migrations: once per open) left out
            conn.execute("SELECT pg_stat_statements_reset()")
        pid = await make_pipeline(tracker, simple_pipeline())
        await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(30)])
        assert (await tracker.queue_stats()).for_role("coder") is not None
        await finish_all(tracker)
        await tracker.queue_stats()
    finally:
        await tracker.aclose()
    found = [q[:70] for q, _ in _compiled(jit_server)]
    assert not found, "\n".join(found)
