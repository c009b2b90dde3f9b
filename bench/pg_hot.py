"""What a HOT claim could save at most: the server's CPU per row of the grant's update of
``tasks`` as the schema has it, against the same update of only the columns no index reads.

    python -m bench.pg_hot [--tasks 12000] [--rounds 3] [--fillfactor 100]

A grant (``bw_grant``) writes the lease's expiry and id, which ``tasks_claim``,
``tasks_leased``, ``tasks_free`` and ``tasks_ckey_leased`` read: the update is not HOT, so each
row gets a new entry in every index whose predicate it meets (six). A HOT claim would keep
that state off ``tasks``' indexes (a narrow table the claim writes, or index changes) and
update only columns no index reads. Each round seeds ``--tasks`` tasks on a fresh schema of a
stock-durability server (:class:`bench.peers_setup.StockPgServer`), analyzes them (and with
``--fillfactor`` below 100 rewrites the table so every page has room for HOT versions), then
updates them ten rows a statement, each its own transaction, as claims of ten do: ``grant``
sets the grant's columns, ``hot`` the same minus the indexed ones. Printed per kind: the
backend's CPU per row (``/proc``), its share of HOT updates (``pg_stat_user_tables``) and the
WAL per row. A bound only: the claim's other work (its scan, the run's insert) is not here,
and a design moving the lease elsewhere pays for that table's writes and for a scan that
must skip leased rows some other way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from bench.peers_setup import StockPgServer, load
from bench.postgres import _seed
from tests.postgres.server import PgServer, find_bindir

#: The grant's update (``bw_grant``'s columns; the values as a lease's).
GRANT = (
    "UPDATE tasks SET lease_expires_at_ms = 99999999999999, last_attempt = last_attempt + 1, "
    "lease_id = md5(seq::text), lease_run_id = md5(seq::text), "
    "lease_token_sha256 = md5(seq::text), lease_ttl_ms = 30000 WHERE seq = ANY(%s)"
)
#: The same without the columns an index reads (lease_expires_at_ms, lease_id).
HOT = (
    "UPDATE tasks SET last_attempt = last_attempt + 1, lease_run_id = md5(seq::text), "
    "lease_token_sha256 = md5(seq::text), lease_ttl_ms = 30000 WHERE seq = ANY(%s)"
)
WARM = 200  # rows updated before the measurement (plans, caches)


def _backend_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(server: PgServer, kind: str, n: int, fillfactor: int) -> dict[str, float]:
    """Seed ``n`` tasks on a fresh schema and update them as ``kind`` (grant or hot)."""
    import psycopg

    schema = f"hot_{uuid.uuid4().hex[:10]}"
    anyio.run(_seed, f"{server.url}?schema={schema}", n)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"SET search_path = {schema}")
        if fillfactor < 100:
            conn.execute(f"ALTER TABLE tasks SET (fillfactor = {fillfactor})")
            conn.execute("VACUUM FULL tasks")
        conn.execute("ANALYZE tasks")
        seqs = [row[0] for row in conn.execute("SELECT seq FROM tasks ORDER BY seq")]
        found = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert found is not None
        pid = int(found[0])
        sql = GRANT if kind == "grant" else HOT
        for i in range(0, WARM, 10):
            conn.execute(sql, (seqs[i : i + 10],))
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        cpu = _backend_cpu_s(pid)
        for i in range(WARM, len(seqs), 10):
            conn.execute(sql, (seqs[i : i + 10],))
        cpu = _backend_cpu_s(pid) - cpu
        wal = conn.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn", lsn).fetchone()
        conn.execute("SELECT pg_stat_force_next_flush()")  # flushed as that statement ends
        conn.execute("SELECT pg_stat_clear_snapshot()")
        stats = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE schemaname = %s AND relname = 'tasks'",
            (schema,),
        ).fetchone()
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    assert stats is not None
    assert wal is not None
    rows = len(seqs) - WARM
    updates, hot = stats
    return {
        "cpu_us": cpu / rows * 1e6,
        "hot_pct": 100.0 * hot / updates if updates else 0.0,
        "wal_bytes": float(wal[0]) / rows,
    }


def main() -> None:
    """Run the rounds (each kind first in every other round) and print one row per kind."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fillfactor", type=int, default=100)
    args = parser.parse_args()
    if args.tasks <= WARM or args.rounds < 1 or not 10 <= args.fillfactor <= 100:
        parser.error(f"--tasks: more than {WARM}; --rounds: at least 1; --fillfactor: 10-100")
    bindir = find_bindir()
    if bindir is None:
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    runs: dict[str, list[dict[str, Any]]] = {"grant": [], "hot": []}
    server = StockPgServer.create(bindir)
    began = f"load {load()} at {time.strftime('%H:%M:%S', time.gmtime())} UTC"
    try:
        server.start()
        for round_no in range(args.rounds):
            kinds = list(runs) if round_no % 2 == 0 else list(reversed(runs))
            for kind in kinds:
                runs[kind].append(run_once(server, kind, args.tasks, args.fillfactor))
    finally:
        server.destroy()
    print(
        f"{args.tasks} tasks, 10 rows a statement, fillfactor {args.fillfactor}, "
        f"{args.rounds} round(s); {began}, load {load()} at "
        f"{time.strftime('%H:%M:%S', time.gmtime())} UTC"
    )
    print("| update | server CPU us/row | per round | HOT % | WAL bytes/row |")
    print("| --- | --- | --- | --- | --- |")
    for kind, rows in runs.items():
        each = ", ".join(f"{r['cpu_us']:.1f}" for r in rows)
        print(
            f"| {kind} | {statistics.median(r['cpu_us'] for r in rows):.1f} | {each} | "
            f"{statistics.median(r['hot_pct'] for r in rows):.0f} | "
            f"{statistics.median(r['wal_bytes'] for r in rows):.0f} |"
        )


if __name__ == "__main__":
    main()
