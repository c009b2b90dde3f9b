"""Worker throughput and memory on the PostgreSQL rail, beside the embedded rail, in one run.

    python -m bench.postgres [--tasks 2000] [--concurrency 10] [--pool-size 4] [--rounds 1]
                             [--phases pg1,pg2,procrastinate1,procrastinate2,embedded1]
                             [--ab OLD_TREE] [--analyze]

The no-op drain of :mod:`bench.worker` (real ``python -m worker run --drain`` processes, the
``python`` executor calling :func:`bench.worker.noop`) on a PostgreSQL started for the run
(Debian's binaries in a temp dir on a free 127.0.0.1 port, see ``tests/postgres/server.py``) at
its stock durability (:class:`bench.peers_setup.StockPgServer`: every commit flushed; the
settings are printed), with 1 and 2 worker processes; ``embedded1`` is :mod:`bench.worker`'s
one-process drain on SQLite for the peak-RSS comparison. Throughput is measured on the rail's
own timestamps (first claim -> last transition), peak RSS and CPU per task from ``wait4``, that
CPU split between the worker processes' main threads (the event loop) and their other threads
(the pool's, the wake-up listener's; :class:`bench.worker.ThreadCpu`).
``procrastinate1``/``2`` are procrastinate's workers on the same server in the same run
(:func:`bench.peers.procrastinate_drain`, the ``bench`` extra: ``pip install -e '.[bench]'``);
the last column is each PostgreSQL rail row against procrastinate's with as many processes.

This machine may be shared and noisy: ``--rounds N`` runs every phase N times, round-robin (each
round runs each phase once), and prints the median of each column with every round's tasks/s;
``server CPU us/task`` is the PostgreSQL server's own CPU (its processes' user + system time)
over the drain, ``commits/task`` its transactions committed (``pg_stat_database``; on the hot
path each statement is one: a report with the claim riding along, a report or a claim alone).
``--ab OLD_TREE`` adds ``pgold1``/``pgold2`` phases: the same drains with the worker processes
(and the seeding, so the schema is that tree's) of another source tree, e.g. ``git worktree
add /tmp/before <sha>``, interleaved with this tree's. ``--analyze`` analyzes
the seeded tasks before each drain, as autovacuum does after a large submit: a fresh schema has
no statistics yet, and the server plans some statements differently with them
(docs/benchmarks/postgresql.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from bench.peers_setup import StockPgServer, pg_settings
from bench.rss import reap
from bench.worker import PIPELINE, ThreadCpu, _drain, _spawn, noop_config
from tests.postgres.server import PgServer, find_bindir
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

PHASES = ("pg1", "pg2", "procrastinate1", "procrastinate2", "embedded1")
OLD_PHASES = ("pgold1", "pgold2")


def _config(tmp: Path, url: str, concurrency: int) -> Path:
    return noop_config(tmp / f"bench-{uuid.uuid4().hex[:8]}.toml", url, concurrency=concurrency)


async def _seed(url: str, n: int) -> None:
    tracker = await open_tracker(url)
    try:
        pid = await tracker.create_pipeline("bench", PIPELINE)
        for start in range(0, n, 500):
            batch = [
                TaskCreate(pipeline_id=pid, title=f"t{i}")
                for i in range(start, min(n, start + 500))
            ]
            await tracker.create_tasks(batch)
    finally:
        await tracker.aclose()


def _server_cpu_s(server: PgServer) -> float:
    """CPU seconds of the server's processes so far: the postmaster's own and reaped children's,
    plus its live children's (the backends)."""
    assert server.proc is not None
    tick = os.sysconf("SC_CLK_TCK")

    def fields(pid: int | str) -> list[str]:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    total = sum(int(x) for x in fields(server.proc.pid)[11:15])
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                child = fields(entry)
            except OSError:
                continue
            if int(child[1]) == server.proc.pid:
                total += int(child[11]) + int(child[12])
    return total / tick


def _commits(server: PgServer) -> int:
    """Transactions committed in the server's database so far, once every other client's
    backend has gone (a backend reports its counts when it exits) and the count holds still:
    the drain's commits, its statements on the hot path (each is one transaction)."""
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        last = -1
        for _ in range(100):  # at most ~5 s
            others = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                "AND pid <> pg_backend_pid()"
            ).fetchone()
            conn.execute("SELECT pg_stat_clear_snapshot()")
            found = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
            count = int(found[0]) if found is not None else 0
            if others is not None and others[0] == 0 and count == last:
                return count
            last = count
            time.sleep(0.05)
        return last


def seeded_schema(
    server: PgServer, n: int, root: Path | None = None, pool_size: int = 4
) -> tuple[str, str]:
    """A fresh schema with ``n`` no-op tasks, migrated and seeded by ``root``'s tree (None:
    this one, in process): its name and the rail URL a worker of that tree opens."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = f"{server.url}?schema={schema}&pool_size={pool_size}"
    if root is None:
        anyio.run(_seed, url, n)
    else:  # that tree's migrations and seeding
        code = f"import anyio; from bench.postgres import _seed; anyio.run(_seed, {url!r}, {n})"
        env = {**os.environ, "PYTHONPATH": str(root)}
        subprocess.run([sys.executable, "-c", code], cwd=root, env=env, check=True)
    return schema, url


def _pg_drain(
    server: PgServer,
    n: int,
    procs: int,
    concurrency: int,
    pool_size: int = 4,
    root: Path | None = None,
    analyze: bool = False,
) -> dict[str, Any]:
    """A drain by ``procs`` workers of ``root``'s tree (None: this one, seeded in process);
    ``analyze``: the seeded tasks analyzed first, as autovacuum does after a submit of more than
    50 rows (a fresh schema's tables have no statistics until its next pass). Only ``tasks``:
    an analyzed empty ``runs`` is planned as empty for as long as a connection keeps its plans,
    a state no rail that has run a while is in."""
    import psycopg

    schema, url = seeded_schema(server, n, root, pool_size)
    if analyze:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(f"ANALYZE {schema}.tasks")
    config = _config(server.root, url, concurrency)
    commits = _commits(server)
    cpu = _server_cpu_s(server)
    wall = time.perf_counter()
    workers = [_spawn_in(config, root) for _ in range(procs)]
    threads = ThreadCpu([w.pid for w in workers])
    reaped = reap(workers)
    loop_cpu, other_cpu = threads.stop()
    wall = time.perf_counter() - wall
    cpu = _server_cpu_s(server) - cpu
    commits = _commits(server) - commits
    with psycopg.connect(server.url) as conn:
        row = conn.execute(
            f"SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM {schema}.runs "
            "WHERE status = 'completed'"
        ).fetchone()
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    assert row is not None
    first, last, done = row
    span = (last - first) / 1000 if done else 0.0
    return {
        "rail": "postgres" if root is None else "postgres (old tree)",
        "procs": procs,
        "done": done,
        "tasks_per_s": done / span if span else 0.0,
        "span_s": span,
        "wall_s": wall,
        "peak_rss_mib": max(rss for rss, _ in reaped),
        "cpu_us_per_task": sum(cpu for _, cpu in reaped) / done * 1e6 if done else 0.0,
        "loop_us_per_task": loop_cpu / done * 1e6 if done else 0.0,
        "threads_us_per_task": other_cpu / done * 1e6 if done else 0.0,
        "server_cpu_us_per_task": cpu / done * 1e6 if done else 0.0,
        "commits_per_task": commits / done if done else 0.0,
        "exit_codes": [p.returncode for p in workers],
    }


def _spawn_in(config: Path, root: Path | None) -> subprocess.Popen[bytes]:
    """A worker of this tree or of ``root``, in the same environment either way (bytecode
    caching allowed: :func:`bench.worker.worker_env`; an older tree's worker started with
    ``PYTHONDONTWRITEBYTECODE`` compiled its modules at every start, ~20-40 us/task more)."""
    return _spawn(config, root)


def _phase(
    phase: str, server: PgServer | None, args: argparse.Namespace, old: Path | None
) -> dict[str, Any]:
    if phase == "embedded1":
        return {"rail": "embedded", **_drain(args.tasks, 1, args.concurrency)}
    assert server is not None
    if phase.startswith("procrastinate"):
        from bench.peer_drains import procrastinate_drain

        procs = int(phase.removeprefix("procrastinate"))
        found = procrastinate_drain(server, args.tasks, procs, args.concurrency)
        return {"rail": "procrastinate", "procs": procs, **found}
    root = old if phase.startswith("pgold") else None
    procs = int(phase.removeprefix("pgold" if root else "pg"))
    return _pg_drain(
        server, args.tasks, procs, args.concurrency, args.pool_size, root, args.analyze
    )


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r.get(key, 0.0)) for r in rows)


def main() -> None:
    """Run the phases and print one table row per phase."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--pool-size", type=int, default=4, help="connections per worker")
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--rounds", type=int, default=1, help="runs of each phase (median)")
    parser.add_argument("--ab", type=Path, default=None, help="an older tree: pgold1/pgold2 too")
    parser.add_argument(
        "--analyze",
        action="store_true",
        help="analyze the seeded tasks before each drain (as autovacuum does after a submit)",
    )
    args = parser.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    if args.ab is not None:
        if not (args.ab / "tracker_client" / "postgres").is_dir():
            parser.error(f"--ab {args.ab}: not a source tree with tracker_client/postgres")
        phases += [p for p in OLD_PHASES if p.replace("old", "") in phases]
    unknown = sorted(set(phases) - set(PHASES) - set(OLD_PHASES))
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(unknown)}; known: {', '.join(PHASES)}")
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    bindir = find_bindir()
    if bindir is None and any(p.startswith("pg") for p in phases):
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in phases}
    server = StockPgServer.create(bindir) if bindir is not None else None
    try:
        if server is not None:
            server.start()
            print(pg_settings(server))
        for _ in range(args.rounds):
            for phase in phases:
                runs[phase].append(_phase(phase, server, args, args.ab))
    finally:
        if server is not None:
            server.destroy()
    peer = {
        int(p.removeprefix("procrastinate")): _median(rows, "tasks_per_s")
        for p, rows in runs.items()
        if p.startswith("procrastinate")
    }
    print(f"PostgreSQL rail through {_psycopg_impl()}")
    print(
        "| rail | procs | tasks | tasks/s | peak RSS MiB | CPU us/task | loop thread us/task "
        "| other threads us/task | server CPU us/task | commits/task | x procrastinate "
        "| tasks/s per round |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rows in runs.values():
        first = rows[0]
        rate = _median(rows, "tasks_per_s")
        ratio = peer.get(first["procs"]) if first["rail"].startswith("postgres") else None
        shown = f"{rate / ratio:.1f}" if ratio else "-"
        server_cpu = _median(rows, "server_cpu_us_per_task")
        each = ", ".join(f"{r['tasks_per_s']:.0f}" for r in rows)
        print(
            f"| {first['rail']} | {first['procs']} | {first['done']} | {rate:.0f} | "
            f"{_median(rows, 'peak_rss_mib'):.1f} | {_median(rows, 'cpu_us_per_task'):.0f} | "
            f"{_cell(rows, 'loop_us_per_task')} | {_cell(rows, 'threads_us_per_task')} | "
            f"{f'{server_cpu:.0f}' if server_cpu else '-'} | {_cell(rows, 'commits_per_task', 3)} "
            f"| {shown} | "
            f"{each} |"
        )


def _cell(rows: list[dict[str, Any]], key: str, digits: int = 0) -> str:
    """A column's median (``-`` for a phase that does not measure it: threads, commits)."""
    return f"{_median(rows, key):.{digits}f}" if any(key in r for r in rows) else "-"


def _psycopg_impl() -> str:
    """Which psycopg the worker processes load (its version and libpq implementation: the
    bundled ``binary`` wheel, ``c`` built against the system libpq, or ``python``): the peak
    RSS column depends on it."""
    try:
        import psycopg
    except ImportError:
        return "no psycopg (pip install -e '.[postgres]')"
    libpq = psycopg.pq.version()
    return (
        f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__} implementation, "
        f"libpq {libpq // 10000}.{libpq % 100})"
    )


if __name__ == "__main__":
    main()
