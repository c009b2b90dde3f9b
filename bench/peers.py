"""The same-run peer benchmark: arq, procrastinate and this worker on each of its rails.

    python -m bench.peers [--tasks 5000] [--concurrency 10] [--runs 3] [--procs 1,2]
                          [--systems arq,procrastinate,embedded,served,postgres]

Brokers are started by this script on free 127.0.0.1 ports from Debian's packages and stopped
by pid: ``redis-server`` (``apt-get install redis-server``) for arq, PostgreSQL
(``/usr/lib/postgresql/*/bin``, see ``tests/postgres/server.py``) for procrastinate and for this
project's PostgreSQL rail. The peers come from the ``bench`` extra (``pip install -e
'.[bench]'``). Each measurement drains N no-op tasks with worker processes at the given
concurrency:

* ``arq``: ``burst`` workers, ``poll_delay`` 0.05 s (:mod:`bench.peer_workers`);
* ``procrastinate``: ``wait=False`` workers on a fresh database;
* ``embedded``: ``python -m worker run`` on a SQLite file (:func:`bench.worker._drain`);
* ``served``: the same worker through a ``tracker serve`` process on that file (HTTP);
* ``postgres``: the worker on the PostgreSQL rail (:func:`bench.postgres._pg_drain`); skipped
  with the reason when that rail does not open.

Rounds interleave the systems (round 1: every system with 1 process, then with 2; round 2 ...)
so a machine's load drifts over all of them alike. Throughput is the queue's own timestamps
(first start -> last finish), so process start-up is excluded; peak RSS is the max over the
worker processes of their own ``VmHWM`` (:mod:`bench.rss`), CPU per task the user + system time
of the worker processes from ``wait4`` (start-up included; brokers and ``tracker serve`` not
counted). Read the figures as ratios within one
run: the "x arq" columns are the median of each round's ratio against arq's run of that round
(CPU per task is the figure a loaded machine moves least).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import anyio

from bench.peer_drains import Redis, Result, _reap, _result, arq_drain, procrastinate_drain
from bench.postgres import _config, _pg_drain
from bench.remote import _start_server
from bench.worker import _drain, _seed, _spawn
from tests.postgres.server import PgServer, find_bindir

SYSTEMS = ("arq", "procrastinate", "embedded", "served", "postgres")


# -- this project's served rail -------------------------------------------------------------------
def served_drain(n: int, procs: int, concurrency: int) -> Result:
    """The worker through ``tracker serve`` (its own SQLite file) drains ``n`` no-op tasks."""
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "served.db"
        anyio.run(_seed, db, n)
        server, url = _start_server(db)
        try:
            config = _config(tmp, url, concurrency)
            workers = [_spawn(config) for _ in range(procs)]
            reaped = _reap(workers)
        finally:
            server.terminate()
            server.wait(30)
        with sqlite3.connect(db) as conn:
            first, last, done = conn.execute(
                "SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM runs "
                "WHERE status = 'completed'"
            ).fetchone()
        return _result(workers, reaped, done, (first or 0) / 1000, (last or 0) / 1000)


# -- the run --------------------------------------------------------------------------------------
def _runners(
    systems: list[str], redis: Redis | None, pg: PgServer | None
) -> dict[str, Callable[[int, int, int], Result]]:
    def arq(n: int, p: int, c: int) -> Result:
        assert redis is not None
        return arq_drain(redis, n, p, c)

    def procrastinate(n: int, p: int, c: int) -> Result:
        assert pg is not None
        return procrastinate_drain(pg, n, p, c)

    def postgres(n: int, p: int, c: int) -> Result:
        assert pg is not None
        return _pg_drain(pg, n, p, c)

    known: dict[str, Callable[[int, int, int], Result]] = {
        "arq": arq,
        "procrastinate": procrastinate,
        "embedded": _drain,
        "served": served_drain,
        "postgres": postgres,
    }
    return {name: known[name] for name in systems}


def _measure(
    args: argparse.Namespace, runners: dict[str, Callable[[int, int, int], Result]]
) -> tuple[dict[tuple[str, int], list[Result]], dict[str, str]]:
    """Every (system, procs) ``args.runs`` times, interleaved; a system that fails is skipped
    from then on with the reason."""
    results: dict[tuple[str, int], list[Result]] = {}
    skipped: dict[str, str] = {}
    for run in range(args.runs):
        for procs in args.procs:
            for name, runner in runners.items():
                if name in skipped:
                    continue
                try:
                    r = runner(args.tasks, procs, args.concurrency)
                except Exception as exc:  # a rail being built may not open: say why, go on
                    skipped[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                    traceback.print_exc(limit=3, file=sys.stderr)
                    continue
                if r["done"] != args.tasks:
                    skipped[name] = f"drained {r['done']} of {args.tasks} (exit {r['exit_codes']})"
                    continue
                r["round"] = run
                results.setdefault((name, procs), []).append(r)
                print(
                    f"  run {run + 1} {name} x{procs}: {r['tasks_per_s']:.0f} tasks/s, "
                    f"{r['peak_rss_mib']:.1f} MiB, {r['cpu_us_per_task']:.0f} us/task",
                    file=sys.stderr,
                    flush=True,
                )
    return results, skipped


def _ratio(rows: list[Result], base: list[Result], key: str) -> str:
    by_round = {r["round"]: r[key] for r in base}
    ratios = [r[key] / by_round[r["round"]] for r in rows if by_round.get(r["round"])]
    return f"{statistics.median(ratios):.2f}" if ratios else "-"


def _print(args: argparse.Namespace, results: dict[tuple[str, int], list[Result]]) -> None:
    print(
        f"{args.tasks} no-op tasks, concurrency {args.concurrency}, {args.runs} run(s) each "
        "(median; tasks/s range in brackets)"
    )
    print(
        "| system | procs | tasks/s | peak RSS MiB | CPU us/task | x arq tasks/s | x arq RSS "
        "| x arq CPU |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for procs in args.procs:
        base = results.get(("arq", procs), [])
        for name in SYSTEMS:
            rows = results.get((name, procs))
            if not rows:
                continue
            tps = [r["tasks_per_s"] for r in rows]
            rss = statistics.median(r["peak_rss_mib"] for r in rows)
            cpu = statistics.median(r["cpu_us_per_task"] for r in rows)
            print(
                f"| {name} | {procs} | {statistics.median(tps):.0f} [{min(tps):.0f}-{max(tps):.0f}]"
                f" | {rss:.1f} | {cpu:.0f} | {_ratio(rows, base, 'tasks_per_s')} | "
                f"{_ratio(rows, base, 'peak_rss_mib')} | {_ratio(rows, base, 'cpu_us_per_task')} |"
            )


def main() -> None:
    """Start the brokers the chosen systems need, measure, print the table, stop them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--procs", default="1,2", help="worker process counts (default: 1,2)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
    try:
        args.procs = [int(p) for p in args.procs.split(",") if p]
    except ValueError:
        parser.error(f"--procs must be comma-separated integers, not {args.procs!r}")
    if not args.procs or min(args.procs) < 1 or args.tasks < 1 or args.runs < 1:
        parser.error("--procs, --tasks and --runs must be at least 1")
    needs_pg = {"procrastinate", "postgres"} & set(systems)
    bindir = find_bindir()
    if needs_pg and bindir is None:
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    with tempfile.TemporaryDirectory() as tmp_s:
        redis = Redis(Path(tmp_s)) if "arq" in systems else None
        pg = PgServer.create(bindir) if needs_pg and bindir is not None else None
        try:
            if pg is not None:
                pg.start()
            results, skipped = _measure(args, _runners(systems, redis, pg))
        finally:
            if pg is not None:
                pg.destroy()
            if redis is not None:
                redis.stop()
    _print(args, results)
    for name, why in skipped.items():
        print(f"{name}: skipped: {why}")


if __name__ == "__main__":
    main()
