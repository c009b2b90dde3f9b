"""Worker throughput and memory on the PostgreSQL rail, beside the embedded rail, in one run.

    python -m bench.postgres [--tasks 2000] [--concurrency 10] [--pool-size 4]
                             [--phases pg1,pg2,procrastinate1,procrastinate2,embedded1]

The no-op drain of :mod:`bench.worker` (real ``python -m worker run --drain`` processes, the
``python`` executor calling :func:`bench.worker.noop`) on a PostgreSQL started for the run
(Debian's binaries in a temp dir on a free 127.0.0.1 port, see ``tests/postgres/server.py``),
with 1 and 2 worker processes; ``embedded1`` is :mod:`bench.worker`'s one-process drain on SQLite
for the peak-RSS comparison. Throughput is measured on the rail's own timestamps (first claim ->
last transition), peak RSS and CPU per task from ``wait4``. ``procrastinate1``/``2`` are
procrastinate's workers on the same server in the same run (:func:`bench.peers.procrastinate_drain`,
the ``bench`` extra: ``pip install -e '.[bench]'``); the last column is each PostgreSQL rail row
against procrastinate's with as many processes.
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from bench.rss import reap
from bench.worker import PIPELINE, _drain, _spawn
from tests.postgres.server import PgServer, find_bindir
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

PHASES = ("pg1", "pg2", "procrastinate1", "procrastinate2", "embedded1")


def _config(tmp: Path, url: str, concurrency: int) -> Path:
    path = tmp / f"bench-{uuid.uuid4().hex[:8]}.toml"
    path.write_text(
        f"""
log_level = "WARNING"
[tracker]
url = "{url}"
[worker]
concurrency = {concurrency}
drain = true
idle_min_s = 0.05
idle_max_s = 2.0
lease_ttl_s = 60
[[roles]]
name = "bench"
executor = "python"
[roles.options]
callable = "bench.worker:noop"
"""
    )
    return path


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


def _pg_drain(
    server: PgServer, n: int, procs: int, concurrency: int, pool_size: int = 4
) -> dict[str, Any]:
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = f"{server.url}?schema={schema}&pool_size={pool_size}"
    anyio.run(_seed, url, n)
    config = _config(server.root, url, concurrency)
    wall = time.perf_counter()
    workers = [_spawn(config) for _ in range(procs)]
    reaped = reap(workers)
    wall = time.perf_counter() - wall
    with psycopg.connect(server.url) as conn:
        row = conn.execute(
            f"SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM {schema}.runs "
            "WHERE status = 'completed'"
        ).fetchone()
    assert row is not None
    first, last, done = row
    span = (last - first) / 1000 if done else 0.0
    return {
        "rail": "postgres",
        "procs": procs,
        "done": done,
        "tasks_per_s": done / span if span else 0.0,
        "span_s": span,
        "wall_s": wall,
        "peak_rss_mib": max(rss for rss, _ in reaped),
        "cpu_us_per_task": sum(cpu for _, cpu in reaped) / done * 1e6 if done else 0.0,
        "exit_codes": [p.returncode for p in workers],
    }


def main() -> None:
    """Run the phases and print one table row per phase."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--pool-size", type=int, default=4, help="connections per worker")
    parser.add_argument("--phases", default=",".join(PHASES))
    args = parser.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(unknown)}; known: {', '.join(PHASES)}")
    bindir = find_bindir()
    if bindir is None and any(p.startswith("pg") for p in phases):
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    rows: list[dict[str, Any]] = []
    server = PgServer.create(bindir) if bindir is not None else None
    try:
        if server is not None:
            server.start()
        for phase in phases:
            if phase == "embedded1":
                rows.append({"rail": "embedded", **_drain(args.tasks, 1, args.concurrency)})
            elif phase.startswith("procrastinate"):
                from bench.peer_drains import procrastinate_drain

                assert server is not None
                procs = int(phase.removeprefix("procrastinate"))
                found = procrastinate_drain(server, args.tasks, procs, args.concurrency)
                rows.append({"rail": "procrastinate", "procs": procs, **found})
            else:
                assert server is not None
                procs = int(phase[2:])
                rows.append(_pg_drain(server, args.tasks, procs, args.concurrency, args.pool_size))
    finally:
        if server is not None:
            server.destroy()
    peer = {r["procs"]: r["tasks_per_s"] for r in rows if r["rail"] == "procrastinate"}
    print("| rail | procs | tasks | tasks/s | peak RSS MiB | CPU us/task | x procrastinate |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ratio = peer.get(r["procs"]) if r["rail"] == "postgres" else None
        shown = f"{r['tasks_per_s'] / ratio:.1f}" if ratio else "-"
        print(
            f"| {r['rail']} | {r['procs']} | {r['done']} | {r['tasks_per_s']:.0f} | "
            f"{r['peak_rss_mib']:.1f} | {r['cpu_us_per_task']:.0f} | {shown} |"
        )


if __name__ == "__main__":
    main()
