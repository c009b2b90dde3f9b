"""The PostgreSQL statements a worker runs while it works read the live rows only: their plans
go through a partial index on those rows, never a scan of every task or run kept.

A rail keeps finished tasks and their runs (docs/benchmarks/retention.md): a
statement that scans them costs more with every one kept. Each statement below is planned as a
server-side prepared statement is once its plan is cached (a generic plan: the parameters are
unknown, so a partial index is usable only when the statement's own text implies its
predicate), with sequential scans priced out, and must name its partial index and no ``Seq
Scan``. Left out on purpose: ``stats.stages`` (health: tasks per stage, every task counts) and
``stats.failed`` (failed runs: an index naming ``runs.status`` would make every finish's update
of its run a non-HOT one).
"""

from __future__ import annotations

import re
import uuid

import psycopg
import pytest

from tests.postgres.server import fresh_schema_url, schema_name, shared_server
from tracker_client.factory import open_tracker
from tracker_client.postgres.dialect import STATEMENTS

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: Statement name -> the partial index its plan must use.
LIVE_ROWS = {
    "stats.dead": "tasks_dead",
    "stats.running": "tasks_leased",
    "stats.live_leases": "tasks_leased",
    "stats.waiting": "tasks_claim",
    "wait.next_expiry": "tasks_leased",
    "claim.preflight": "tasks_leased",
}

_NAMED = re.compile(r"%\((\w+)\)s")


def _numbered(text: str) -> tuple[str, int]:
    """``text`` with its psycopg placeholders as ``$n`` (one number per name), and their count."""
    names: dict[str, int] = {}

    def named(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    text = _NAMED.sub(named, text)
    count = len(names)
    while "%s" in text:
        count += 1
        text = text.replace("%s", f"${count}", 1)
    return text.rstrip().rstrip(";"), count


async def test_the_working_statements_read_live_rows_through_partial_indexes() -> None:
    key = f"live-{uuid.uuid4()}"
    tracker = await open_tracker(fresh_schema_url(key))
    await tracker.aclose()
    plans: dict[str, str] = {}
    with psycopg.connect(
        shared_server().url, autocommit=True, options=f"-c search_path={schema_name(key)}"
    ) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("SET enable_seqscan = off")
        for name in LIVE_ROWS:
            text, count = _numbered(STATEMENTS[name])
            conn.execute(f"PREPARE live AS {text}")
            args = ", ".join(["NULL"] * count)
            rows = conn.execute(f"EXPLAIN EXECUTE live{f'({args})' if count else ''}").fetchall()
            conn.execute("DEALLOCATE live")
            plans[name] = "\n".join(str(r[0]) for r in rows)
    wrong = {
        name: plan
        for name, plan in plans.items()
        if "Seq Scan" in plan or f" {LIVE_ROWS[name]} " not in f"{plan} "
    }
    assert wrong == {}
