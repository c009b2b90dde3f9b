"""Retention on the PostgreSQL rail for :mod:`bench.peers` (``--kept K1,K2``): the drain's rate
with K finished tasks already in the rail's tables.

For each count a template database is filled once: K no-op tasks seeded into the ``bench``
pipeline and drained by real workers (2 processes; 50,000 at a time, under the rail's default
backlog cap), then ``VACUUM ANALYZE`` (the settled state of a rail that has run a while,
autovacuum on as stock). Each measurement copies the template (``CREATE DATABASE ... TEMPLATE``,
a file copy at a checkpoint: ``STRATEGY FILE_COPY``), seeds N more tasks into the same pipeline
and drains them as :func:`bench.postgres._pg_drain` does; only the runs started after the
workers were spawned count. The rows are named ``postgres kept=K`` and interleave with the other
systems in every round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from functools import partial
from typing import Any

import anyio

from bench.peer_drains import Result, _reap, _result
from bench.postgres import _config, _seed
from bench.worker import _spawn
from tests.postgres.server import PgServer
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

#: The schema the rail keeps in each template database.
SCHEMA = "bench"
#: Worker processes and their concurrency filling a template.
FILL_PROCS, FILL_CONCURRENCY = 2, 20
#: Tasks seeded and drained at a time while filling (under the rail's default backlog cap).
FILL_CHUNK = 50_000


def _db_url(server: PgServer, database: str, pool_size: int) -> str:
    base = server.url.rsplit("/", 1)[0]
    return f"{base}/{database}?schema={SCHEMA}&pool_size={pool_size}"


def _admin(server: PgServer, sql: str) -> None:
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(sql)


def _completed(server: PgServer, database: str, since_ms: int) -> tuple[Any, Any, Any]:
    import psycopg

    base = server.url.rsplit("/", 1)[0]
    with psycopg.connect(f"{base}/{database}") as conn:
        row = conn.execute(
            f"SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM {SCHEMA}.runs "
            "WHERE status = 'completed' AND started_at_ms >= %s",
            (since_ms,),
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def _file_copy(server: PgServer) -> str:
    """``STRATEGY FILE_COPY`` where the server has it (15 and later): the copy is made at a
    checkpoint, not written through the WAL that the drain right after it then flushes."""
    import psycopg

    with psycopg.connect(server.url) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    return " STRATEGY FILE_COPY" if row is not None and int(row[0]) >= 150000 else ""


def fill_template(server: PgServer, count: int, pool_size: int) -> str:
    """A template database holding ``count`` finished no-op tasks; its name."""
    import psycopg

    name = f"kept_{count}_{uuid.uuid4().hex[:6]}"
    _admin(server, f"CREATE DATABASE {name}")
    url = _db_url(server, name, pool_size)
    anyio.run(_seed, url, 0)  # the pipeline
    started = time.monotonic()
    config = _config(server.root, url, FILL_CONCURRENCY)
    for chunk in range(0, count, FILL_CHUNK):  # the rail's backlog cap is 100,000
        anyio.run(_seed_more, url, min(FILL_CHUNK, count - chunk))
        _reap([_spawn(config) for _ in range(FILL_PROCS)])
    _, _, done = _completed(server, name, 0)
    if done != count:
        raise RuntimeError(f"filling {name}: {done} of {count} tasks finished")
    base = server.url.rsplit("/", 1)[0]
    with psycopg.connect(f"{base}/{name}", autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    print(
        f"  template {name}: {count} finished tasks in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return name


async def _seed_more(url: str, n: int) -> None:
    tracker = await open_tracker(url)
    try:
        [pid] = [p.id for p in await tracker.list_pipelines() if p.name == "bench"]
        for start in range(0, n, 500):
            batch = [
                TaskCreate(pipeline_id=pid, title=f"t{i}")
                for i in range(start, min(n, start + 500))
            ]
            await tracker.create_tasks(batch)
    finally:
        await tracker.aclose()


def kept_drain(
    server: PgServer, template: str, pool_size: int, n: int, procs: int, concurrency: int
) -> Result:
    """``procs`` workers drain ``n`` new no-op tasks on a copy of ``template``."""
    name = f"run_{uuid.uuid4().hex[:12]}"
    _admin(server, f"CREATE DATABASE {name} TEMPLATE {template}{_file_copy(server)}")
    try:
        url = _db_url(server, name, pool_size)
        anyio.run(_seed_more, url, n)
        config = _config(server.root, url, concurrency)
        since_ms = int(time.time() * 1000)
        workers = [_spawn(config) for _ in range(procs)]
        reaped = _reap(workers)
        first, last, done = _completed(server, name, since_ms)
    finally:
        _admin(server, f"DROP DATABASE IF EXISTS {name}")
    return _result(workers, reaped, done, (first or 0) / 1000, (last or 0) / 1000)


def kept_runners(
    server: PgServer, counts: list[int], concurrency: int, pool_size: int
) -> dict[str, Any]:
    """A runner per count (``postgres kept=K``), each on its own filled template."""
    runners: dict[str, Any] = {}
    for count in counts:
        template = fill_template(server, count, pool_size)
        runners[f"postgres kept={count}"] = partial(kept_drain, server, template, pool_size)
    return runners


def kept_table(args: argparse.Namespace, results: dict[tuple[str, int], list[Result]]) -> list[str]:
    """Each kept count's rate beside the first count's (medians of per-round ratios)."""
    first = f"postgres kept={args.kept[0]}"
    lines = [
        "",
        f"| PostgreSQL rail, finished tasks kept | procs | tasks/s [range] | CPU us/task "
        f"| x {first} tasks/s |",
        "| --- | --- | --- | --- | --- |",
    ]
    from bench.peers import ratio

    for procs in args.procs:
        base = results.get((first, procs), [])
        for count in args.kept:
            rows = results.get((f"postgres kept={count}", procs))
            if not rows:
                continue
            tps = [r["tasks_per_s"] for r in rows]
            cpu = statistics.median(r["cpu_us_per_task"] for r in rows)
            found = ratio(rows, base, "tasks_per_s")
            lines.append(
                f"| {count} | {procs} | {statistics.median(tps):.0f} [{min(tps):.0f}-"
                f"{max(tps):.0f}] | {cpu:.0f} | {'-' if found is None else f'{found:.2f}'} |"
            )
    return lines
