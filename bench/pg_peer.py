"""The PostgreSQL server's work per task: this rail's worker against PgQueuer's, same server.

    python -m bench.pg_peer [--tasks 5000] [--rounds 3] [--procs 1,2] [--concurrency 10]
                            [--systems postgres,pgqueuer,postgres@OLD_TREE] [--top N]

Each round drains ``--tasks`` no-op tasks once per system and number of worker processes, on
one PostgreSQL started for the run at its stock durability
(:class:`bench.peers_setup.StockPgServer`) with ``pg_stat_statements`` loaded, the order of the
systems reversed every other round. ``postgres`` is ``python -m worker run --drain`` on a fresh
schema (:mod:`bench.postgres`; ``postgres@TREE``: another source tree's worker, seeding and
schema); ``pgqueuer`` is PgQueuer's ``QueueManager`` on a fresh database
(:mod:`bench.peer_pgqueuer`: batch 10, drain mode, its default durability). Each drain's tasks
are seeded and analyzed, the server checkpointed, and every other client gone before the
drain's first reading, so what is counted is the drain's alone (and the autovacuum that ran
during it). Per task:

* ``server CPU``: the server's processes' user + system time (``/proc``);
* ``WAL records``, ``WAL bytes``, ``full-page images``, ``b-tree insertions``: the WAL the
  drain wrote, read back with ``pg_walinspect``; ``WAL flushes``: ``pg_stat_wal.wal_sync``;
* ``commits``: ``pg_stat_database.xact_commit`` over every database;
* ``statements``: top-level statements executed (``pg_stat_statements``, utility statements
  such as ``BEGIN``/``COMMIT``/``LISTEN`` included);
* ``HOT %``: the share of row updates that were HOT (``pg_stat_user_tables`` of the drain's
  schema or database);
* ``worker CPU``: the worker processes' own (``wait4``: start-up included).

``--top N`` tracks nested statements too (``pg_stat_statements.track = all``, with planning)
and prints, per system and number of processes, its N costliest statements in the first round
(execution and planning time per task, calls per task, plans per call; a nested statement's
time is part of its caller's).

Tasks/s are each system's own (the rail's run timestamps, PgQueuer's log table). The server
figures do not move with the machine's load; the CPU ones do, so read them within a round.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from bench.peers_setup import StockPgServer, load, pg_settings
from bench.postgres import _server_cpu_s, seeded_schema
from bench.rss import reap
from bench.worker import _spawn, noop_config
from tests.postgres.server import PgServer, find_bindir

Result = dict[str, Any]


class StatementsPgServer(StockPgServer):
    """:class:`StockPgServer` with ``pg_stat_statements`` loaded (top-level statements)."""

    def settings(self) -> list[str]:
        """The stock server's, and the statements' extension."""
        return [*super().settings(), "shared_preload_libraries=pg_stat_statements"]


class NestedStatementsPgServer(StatementsPgServer):
    """:class:`StatementsPgServer` tracking nested statements and their planning too."""

    def settings(self) -> list[str]:
        """The statements' server's, tracking every statement's execution and planning."""
        return [
            *super().settings(),
            "pg_stat_statements.track=all",
            "pg_stat_statements.track_planning=on",
        ]


@dataclass(frozen=True, slots=True)
class Mark:
    """The server's counters at one moment, with no other client connected."""

    lsn: str
    cpu_s: float
    commits: int
    statements: int
    flushes: int


def _quiet(conn: Any) -> None:
    """Wait (at most ~10 s) until this is the only client backend: a backend reports its
    counts (commits, WAL, statements) when it exits."""
    for _ in range(200):
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND pid <> pg_backend_pid()"
        ).fetchone()
        if row is not None and row[0] == 0:
            return
        time.sleep(0.05)


def mark(server: PgServer, checkpoint: bool = False, reset: bool = False) -> Mark:
    """The counters now (``checkpoint``: after a checkpoint, so full-page images count from
    the same start in every drain; ``reset``: the statements' statistics reset first)."""
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        _quiet(conn)
        if checkpoint:
            conn.execute("CHECKPOINT")
        if reset:
            conn.execute("SELECT public.pg_stat_statements_reset()")
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT (SELECT sum(xact_commit) FROM pg_stat_database), "
            "(SELECT coalesce(sum(calls), 0) FROM public.pg_stat_statements WHERE toplevel), "
            "(SELECT wal_sync FROM pg_stat_wal), pg_current_wal_insert_lsn()::text"
        ).fetchone()
    assert row is not None
    commits, calls, flushes, lsn = row
    return Mark(str(lsn), _server_cpu_s(server), int(commits), int(calls), int(flushes))


def wal(server: PgServer, start: str, stop: str) -> dict[str, float]:
    """Records, bytes, full-page images and b-tree insertions written between two LSNs."""
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("SELECT pg_switch_wal()")  # the range flushed, so it can be read back
        rows = conn.execute(
            "SELECT resource_manager || '/' || record_type, count(*), "
            "count(*) FILTER (WHERE fpi_length > 0) "
            "FROM public.pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) GROUP BY 1",
            (start, stop),
        ).fetchall()
        size = conn.execute("SELECT %s::pg_lsn - %s::pg_lsn", (stop, start)).fetchone()
    assert size is not None
    found = {"records": 0.0, "fpi": 0.0, "bytes": float(size[0]), "btree": 0.0}
    for kind, count, fpi in rows:
        found["records"] += count
        found["fpi"] += fpi
        if kind.startswith("Btree/INSERT"):
            found["btree"] += count
    return found


def _hot(server: PgServer, database: str | None, schema: str | None) -> float:
    """The share of row updates that were HOT (percent) in ``schema`` of the server's database,
    or in the whole ``database``."""
    import psycopg

    url = server.url if database is None else server.url.rsplit("/", 1)[0] + f"/{database}"
    where = "" if schema is None else f" WHERE schemaname = '{schema}'"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            f"SELECT sum(n_tup_upd), sum(n_tup_hot_upd) FROM pg_stat_user_tables{where}"
        ).fetchone()
    assert row is not None
    updates, hot = row
    return 100.0 * float(hot) / float(updates) if updates else 0.0


def _top(server: PgServer, n: int, done: int) -> list[tuple[Any, ...]]:
    """The ``n`` statements the server spent the most time on since the last reset: (exec us
    per task, plan us per task, calls per task, plans per call, top level?, the query's
    start)."""
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT total_exec_time, total_plan_time, calls, plans, toplevel, "
            "left(regexp_replace(query, '\\s+', ' ', 'g'), 80) FROM public.pg_stat_statements "
            "ORDER BY total_exec_time + total_plan_time DESC LIMIT %s",
            (n,),
        ).fetchall()
    return [
        (ex * 1e3 / done, pl * 1e3 / done, calls / done, plans / calls if calls else 0.0, top, q)
        for ex, pl, calls, plans, top, q in rows
    ]


def _measured(server: PgServer, drain: Callable[[], Result], top: int) -> Result:
    """Run ``drain`` (its tasks seeded already) between two marks: the per-task figures (with
    ``top``, the costliest statements too)."""
    before = mark(server, checkpoint=True, reset=top > 0)
    found = drain()
    after = mark(server)
    done = found["done"] or 1
    if top:
        found["top"] = _top(server, top, done)
    figures = wal(server, before.lsn, after.lsn)
    return {
        **found,
        "server_us": (after.cpu_s - before.cpu_s) / done * 1e6,
        "wal_records": figures["records"] / done,
        "wal_bytes": figures["bytes"] / done,
        "wal_fpi": figures["fpi"] / done,
        "btree": figures["btree"] / done,
        "flushes": (after.flushes - before.flushes) / done,
        "commits": (after.commits - before.commits) / done,
        "statements": (after.statements - before.statements) / done,
    }


def ours(
    server: PgServer, n: int, procs: int, concurrency: int, tree: Path | None, top: int = 0
) -> Result:
    """This rail's worker (``tree``'s, when given) drains ``n`` no-op tasks on a fresh schema."""
    import psycopg

    schema, url = seeded_schema(server, n, tree)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"ANALYZE {schema}.tasks")  # as autovacuum does after a submit
    config = noop_config(
        server.root / f"bench-{uuid.uuid4().hex[:8]}.toml", url, concurrency=concurrency
    )

    def drain() -> Result:
        workers = [_spawn(config, tree) for _ in range(procs)]
        reaped = reap(workers)
        with psycopg.connect(server.url) as conn:
            row = conn.execute(
                f"SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM {schema}.runs "
                "WHERE status = 'completed'"
            ).fetchone()
        assert row is not None
        first, last, done = row
        span = (last - first) / 1000 if done else 0.0
        return {
            "done": done,
            "tasks_per_s": done / span if span else 0.0,
            "worker_us": sum(cpu for _, cpu in reaped) / (done or 1) * 1e6,
        }

    found = _measured(server, drain, top)
    found["hot"] = _hot(server, None, schema)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return found


def pgqueuer(server: PgServer, n: int, procs: int, concurrency: int, top: int = 0) -> Result:
    """PgQueuer's workers drain ``n`` no-op jobs on a fresh database."""
    import psycopg

    from bench import peer_pgqueuer
    from bench.peer_drains import _new_database, _peer

    conninfo = _new_database(server)
    database = conninfo.rsplit("/", 1)[1]
    anyio.run(peer_pgqueuer.install, conninfo)
    anyio.run(peer_pgqueuer.seed, conninfo, n)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("ANALYZE pgqueuer")

    def drain() -> Result:
        workers = [_peer("pgqueuer", conninfo, concurrency) for _ in range(procs)]
        reaped = reap(workers)
        with psycopg.connect(conninfo) as conn:
            row = conn.execute(peer_pgqueuer.SPAN_SQL).fetchone()
        assert row is not None
        done, first, last = row
        span = float(last or 0) - float(first or 0)
        return {
            "done": done,
            "tasks_per_s": done / span if span > 0 else 0.0,
            "worker_us": sum(cpu for _, cpu in reaped) / (done or 1) * 1e6,
        }

    found = _measured(server, drain, top)
    found["hot"] = _hot(server, database, None)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {database}")
    return found


COLUMNS = (
    ("tasks_per_s", "tasks/s", 0),
    ("server_us", "server CPU us/task", 0),
    ("worker_us", "worker CPU us/task", 0),
    ("wal_records", "WAL records/task", 1),
    ("wal_bytes", "WAL bytes/task", 0),
    ("wal_fpi", "full-page images/task", 2),
    ("btree", "b-tree insertions/task", 1),
    ("commits", "commits/task", 3),
    ("flushes", "WAL flushes/task", 3),
    ("statements", "statements/task", 3),
    ("hot", "HOT %", 0),
)


def main() -> None:
    """Run the rounds and print one row per system and number of processes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3, help="drains of each (median)")
    parser.add_argument("--procs", default="1,2", help="worker processes, comma-separated")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--systems", default="postgres,pgqueuer")
    parser.add_argument(
        "--top", type=int, default=0, help="also each system's N costliest statements"
    )
    args = parser.parse_args()
    procs = [int(p) for p in args.procs.split(",") if p]
    systems = [s for s in args.systems.split(",") if s]
    for name in systems:
        rail, _, tree = name.partition("@")
        if rail not in ("postgres", "pgqueuer") or (tree and rail != "postgres"):
            parser.error(f"--systems: {name}? postgres, pgqueuer or postgres@TREE")
        if tree and not (Path(tree) / "tracker_client" / "postgres").is_dir():
            parser.error(f"{name}: not a source tree with tracker_client/postgres")
    bindir = find_bindir()
    if bindir is None:
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    import psycopg

    runs: dict[tuple[str, int], list[Result]] = {(s, p): [] for p in procs for s in systems}
    server = (NestedStatementsPgServer if args.top else StatementsPgServer).create(bindir)
    began = f"load {load()} at {time.strftime('%H:%M:%S', time.gmtime())} UTC"
    try:
        server.start()
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA public")
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public")
        settings = pg_settings(server)
        for round_no in range(args.rounds):
            order = list(runs)
            if round_no % 2:
                order.reverse()
            for name, p in order:
                rail, _, tree = name.partition("@")
                if rail == "pgqueuer":
                    found = pgqueuer(server, args.tasks, p, args.concurrency, args.top)
                else:
                    found = ours(
                        server,
                        args.tasks,
                        p,
                        args.concurrency,
                        Path(tree) if tree else None,
                        args.top,
                    )
                if found["done"] != args.tasks:
                    raise SystemExit(f"{name} x{p} finished {found['done']} of {args.tasks}")
                runs[name, p].append(found)
    finally:
        server.destroy()
    print(settings + "; pg_stat_statements loaded")
    print(
        f"{args.tasks} no-op tasks, concurrency {args.concurrency}, {args.rounds} round(s); "
        f"{began}, load {load()} at {time.strftime('%H:%M:%S', time.gmtime())} UTC"
    )
    print(
        "| system | procs | "
        + " | ".join(title for _, title, _ in COLUMNS)
        + " | tasks/s per round |"
    )
    print("| --- | --- |" + " --- |" * (len(COLUMNS) + 1))
    for (name, p), rows in runs.items():
        cells = [
            f"{statistics.median(float(r[key]) for r in rows):.{digits}f}"
            for key, _, digits in COLUMNS
        ]
        each = ", ".join(f"{r['tasks_per_s']:.0f}" for r in rows)
        print(f"| {name} | {p} | " + " | ".join(cells) + f" | {each} |")
    for (name, p), rows in runs.items() if args.top else ():
        print()
        print(f"{name}, {p} process(es), round 1: its {args.top} costliest statements")
        print("| exec us/task | plan us/task | calls/task | plans/call | top level | statement |")
        print("| --- | --- | --- | --- | --- | --- |")
        for ex, pl, calls, plans, top, query in rows[0]["top"]:
            shown = query.replace("|", "\\|")
            print(
                f"| {ex:.1f} | {pl:.1f} | {calls:.3f} | {plans:.2f} | {'yes' if top else 'no'} "
                f"| `{shown}` |"
            )


if __name__ == "__main__":
    main()
