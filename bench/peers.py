"""The same-run peer benchmark: arq, Celery, huey, procrastinate and PgQueuer beside this
worker on each of its rails.

    python -m bench.peers [--tasks 5000] [--concurrency 10] [--runs 3] [--procs 1,2]
                          [--systems arq,celery,huey,procrastinate,pgqueuer,embedded,...]
                          [--kept 1000,200000] [--pickup SAMPLES]

Brokers are started by this script on free 127.0.0.1 ports from Debian's packages and stopped
by pid: ``redis-server`` (``apt-get install redis-server``) for arq and Celery, PostgreSQL
(``/usr/lib/postgresql/*/bin``, see ``tests/postgres/server.py``) at its **stock durability**
(``fsync``, ``synchronous_commit`` and ``full_page_writes`` on: :class:`bench.peers_setup.
StockPgServer`) for procrastinate, PgQueuer and this project's PostgreSQL rail. The peers come
from the ``bench`` extra (``pip install -e '.[bench]'``). Each measurement drains N no-op tasks
with worker processes at the given concurrency:

* ``arq``: ``burst`` workers, ``poll_delay`` 0.05 s (:mod:`bench.peer_workers`);
* ``celery``: a Celery worker on the same Redis, ``--pool threads --concurrency`` N, its
  defaults otherwise, shut down once the queue is empty (:mod:`bench.peer_celery`);
* ``huey``: ``SqliteHuey`` (WAL, ``synchronous=NORMAL`` as the embedded rail), its consumer with
  ``workers`` = the concurrency, thread workers (:mod:`bench.peer_huey`);
* ``procrastinate``: ``wait=False`` workers on a fresh database;
* ``pgqueuer``: its ``QueueManager`` as ``pgq run`` runs it, drain mode, default batch size
  (:mod:`bench.peer_pgqueuer`), on a fresh database;
* ``embedded``: ``python -m worker run`` on a SQLite file (:func:`bench.worker._drain`);
* ``served``: the same worker through a ``tracker serve`` process on that file (HTTP);
* ``postgres``: the worker on the PostgreSQL rail (:func:`bench.postgres._pg_drain`); skipped
  with the reason when that rail does not open.

Every round runs every system (with 1 process, then 2 ...), the systems' order rotating from
round to round, so a machine's load drifts over all of them alike. Throughput is the queue's
own timestamps (first start -> last finish; huey and Celery keep none, so their workers' own
clocks), so
process start-up is excluded; peak RSS is the max over the worker processes of their own
``VmHWM`` (:mod:`bench.rss`), CPU per task the user + system time of the worker processes from
``wait4`` (start-up included; brokers and ``tracker serve`` not counted). Each system is set
beside the best peer of its storage class (SQLite: huey; PostgreSQL: the faster of
procrastinate and PgQueuer by median tasks/s; Redis: the faster of arq and Celery) and
beside arq: the ratios are
medians of each round's ratio (CPU per task is the figure a loaded machine moves least). The
header prints the machine, its load average before and after, the PostgreSQL server's
settings (``SHOW``) and every system's settings.

``--own-venvs`` runs each peer in a venv of its own (:mod:`bench.peers_venvs`: only that peer's
requirements), so its RSS column is its own; :mod:`bench.memory` measures peak RSS that way
for every system, this worker's too.

``--kept K1,K2`` adds the PostgreSQL rail with that many finished tasks kept in its tables
(:mod:`bench.peers_kept`), interleaved in the same rounds, and prints each count's rate against
the first's. ``--pickup SAMPLES`` measures the interactive pickup latency instead
(:mod:`bench.peers_pickup`).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import anyio

from bench import peers_setup
from bench.peer_drains import (
    Redis,
    Result,
    _reap,
    _result,
    arq_drain,
    celery_drain,
    huey_drain,
    pgqueuer_drain,
    procrastinate_drain,
)
from bench.postgres import _config, _pg_drain
from bench.remote import _start_server
from bench.worker import _drain, _seed, _spawn
from tests.postgres.server import PgServer, find_bindir

SYSTEMS = (
    "arq",
    "celery",
    "huey",
    "procrastinate",
    "pgqueuer",
    "embedded",
    "served",
    "postgres",
)
#: The peers (everything else is this project's worker on one of its rails).
PEERS = ("arq", "celery", "huey", "procrastinate", "pgqueuer")
#: Where each system keeps its queue: a system is set beside the best peer of its class.
STORAGE = {
    "arq": "Redis",
    "celery": "Redis",
    "huey": "SQLite",
    "procrastinate": "PostgreSQL",
    "pgqueuer": "PostgreSQL",
    "embedded": "SQLite",
    "served": "SQLite",
    "postgres": "PostgreSQL",
}
#: The PostgreSQL rail's connections per worker process.
POOL_SIZE = 4


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


# -- settings -------------------------------------------------------------------------------------
def _redis_version() -> str:
    done = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    words = done.stdout.split()
    return next((w.removeprefix("v=") for w in words if w.startswith("v=")), "?")


def system_settings(name: str, concurrency: int) -> str:
    """One line saying how ``name`` runs in this benchmark."""
    if name.startswith("postgres@"):
        tree = name.partition("@")[2]
        return f"{name}: {system_settings('postgres', concurrency)}, source tree {tree}"
    if name == "arq":
        import arq.version

        return (
            f"arq {arq.version.VERSION}: redis-server {_redis_version()} (--save '' "
            f"--appendonly no), burst workers, max_jobs={concurrency}, poll_delay 0.05 s"
        )
    if name == "celery":
        from bench.peer_celery import settings as celery_settings

        return celery_settings(concurrency)
    if name == "huey":
        from bench.peer_huey import settings

        return settings(concurrency)
    if name == "procrastinate":
        from importlib.metadata import version

        return (
            f"procrastinate {version('procrastinate')}: PsycopgConnector, "
            f"run_worker(concurrency={concurrency}, wait=False)"
        )
    if name == "pgqueuer":
        from bench.peer_pgqueuer import settings as pgq_settings

        return pgq_settings(concurrency)
    ours = f"python -m worker run, concurrency {concurrency}, no-op python executor"
    if name == "embedded":
        return f"embedded: {ours}, SQLite file (WAL, synchronous=NORMAL)"
    if name == "served":
        return f"served: {ours}, through tracker serve (HTTP, 127.0.0.1) on a SQLite file"
    return f"postgres: {ours}, {peers_setup.psycopg_impl()}, pool_size {POOL_SIZE}"


def _own_venvs(systems: list[str]) -> None:
    """Run each chosen peer on a venv of its own (:mod:`bench.peers_venvs`); say what each
    holds. This worker's rails stay on this interpreter (they import nothing optional)."""
    from bench import peer_drains, peers_venvs

    for name in systems:
        if name in PEERS:
            python = peer_drains.PYTHONS[name] = peers_venvs.python_for(name)
            print(f"- {peers_venvs.summary(name, python)}")


# -- the run --------------------------------------------------------------------------------------
Runner = Callable[[int, int, int], Result]


def _runners(systems: list[str], redis: Redis | None, pg: PgServer | None) -> dict[str, Runner]:
    def arq(n: int, p: int, c: int) -> Result:
        assert redis is not None
        return arq_drain(redis, n, p, c)

    def celery(n: int, p: int, c: int) -> Result:
        assert redis is not None
        return celery_drain(redis, n, p, c)

    def procrastinate(n: int, p: int, c: int) -> Result:
        assert pg is not None
        return procrastinate_drain(pg, n, p, c)

    def pgqueuer(n: int, p: int, c: int) -> Result:
        assert pg is not None
        return pgqueuer_drain(pg, n, p, c)

    def postgres(n: int, p: int, c: int) -> Result:
        assert pg is not None
        return _pg_drain(pg, n, p, c, POOL_SIZE)

    known: dict[str, Runner] = {
        "arq": arq,
        "celery": celery,
        "huey": huey_drain,
        "procrastinate": procrastinate,
        "pgqueuer": pgqueuer,
        "embedded": _drain,
        "served": served_drain,
        "postgres": postgres,
    }
    return {name: known[name] for name in systems}


def _measure(
    args: argparse.Namespace, runners: dict[str, Runner]
) -> tuple[dict[tuple[str, int], list[Result]], dict[str, str]]:
    """Every (system, procs) ``args.runs`` times, interleaved (the order rotating by one each
    round); a system that fails is skipped from then on with the reason."""
    results: dict[tuple[str, int], list[Result]] = {}
    skipped: dict[str, str] = {}
    names = list(runners)
    for run in range(args.runs):
        shift = run % len(names)
        order = names[shift:] + names[:shift]
        for procs in args.procs:
            for name in order:
                if name in skipped:
                    continue
                try:
                    r = runners[name](args.tasks, procs, args.concurrency)
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
                    f"  round {run + 1} {name} x{procs}: {r['tasks_per_s']:.0f} tasks/s, "
                    f"{r['peak_rss_mib']:.1f} MiB, {r['cpu_us_per_task']:.0f} us/task",
                    file=sys.stderr,
                    flush=True,
                )
    return results, skipped


def ratio(rows: list[Result], base: list[Result], key: str) -> float | None:
    """The median over rounds of ``rows``' ``key`` over ``base``'s in the same round."""
    by_round = {r["round"]: r[key] for r in base}
    ratios = [r[key] / by_round[r["round"]] for r in rows if by_round.get(r["round"])]
    return statistics.median(ratios) if ratios else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def best_peer(results: dict[tuple[str, int], list[Result]], storage: str, procs: int) -> str | None:
    """The peer of ``storage`` with the highest median tasks/s at ``procs`` processes."""
    rates = {
        name: statistics.median(r["tasks_per_s"] for r in results[(name, procs)])
        for name in PEERS
        if STORAGE[name] == storage and results.get((name, procs))
    }
    return max(rates, key=lambda name: rates[name]) if rates else None


def table(args: argparse.Namespace, results: dict[tuple[str, int], list[Result]]) -> list[str]:
    """The results as Markdown table lines."""
    lines = [
        "| system | storage | procs | tasks/s [range] | peak RSS MiB | CPU us/task "
        "| best same-storage peer | x peer tasks/s | x peer CPU/task | x peer RSS "
        "| x arq tasks/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for procs in args.procs:
        arq_rows = results.get(("arq", procs), [])
        for name in SYSTEMS:
            rows = results.get((name, procs))
            if not rows:
                continue
            tps = [r["tasks_per_s"] for r in rows]
            rss = statistics.median(r["peak_rss_mib"] for r in rows)
            cpu = statistics.median(r["cpu_us_per_task"] for r in rows)
            peer = best_peer(results, STORAGE[name], procs)
            base = results.get((peer, procs), []) if peer else []
            lines.append(
                f"| {name} | {STORAGE[name]} | {procs} | {statistics.median(tps):.0f} "
                f"[{min(tps):.0f}-{max(tps):.0f}] | {rss:.1f} | {cpu:.0f} | {peer or '-'} | "
                f"{_fmt(ratio(rows, base, 'tasks_per_s'))} | "
                f"{_fmt(ratio(rows, base, 'cpu_us_per_task'))} | "
                f"{_fmt(ratio(rows, base, 'peak_rss_mib'))} | "
                f"{_fmt(ratio(rows, arq_rows, 'tasks_per_s'))} |"
            )
    return lines


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--procs", default="1,2", help="worker process counts (default: 1,2)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument(
        "--kept",
        default="",
        metavar="COUNTS",
        help="also the PostgreSQL rail with each of these counts of finished tasks kept "
        "(comma-separated, e.g. 1000,200000)",
    )
    parser.add_argument(
        "--own-venvs",
        action="store_true",
        help="run each peer's workers in a venv of its own (bench.peers_venvs), so its RSS "
        "column is its own (huey imports redis-py where it is installed)",
    )
    parser.add_argument(
        "--pickup",
        type=int,
        default=0,
        metavar="SAMPLES",
        help="measure pickup latency (submit -> executor start, idle worker) instead",
    )
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    # postgres@TREE: the PostgreSQL rail of another source tree, for a before/after in
    # --pickup (bench.peers_pickup)
    unknown = sorted(
        s
        for s in args.systems
        if s not in SYSTEMS and not (s.startswith("postgres@") and args.pickup)
    )
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
    try:
        args.procs = [int(p) for p in args.procs.split(",") if p]
    except ValueError:
        parser.error(f"--procs must be comma-separated integers, not {args.procs!r}")
    try:
        args.kept = [int(k) for k in args.kept.split(",") if k]
    except ValueError:
        parser.error(f"--kept must be comma-separated integers, not {args.kept!r}")
    if not args.procs or min(args.procs) < 1 or args.tasks < 1 or args.runs < 1:
        parser.error("--procs, --tasks and --runs must be at least 1")
    if args.kept and min(args.kept) < 0:
        parser.error("--kept: counts of finished tasks cannot be negative")
    if args.pickup < 0:
        parser.error("--pickup: the number of samples cannot be negative")
    kinds = {s.partition("@")[0] for s in args.systems}
    args.needs_pg = bool({"procrastinate", "pgqueuer", "postgres"} & kinds or args.kept)
    args.bindir = find_bindir()
    if args.needs_pg and args.bindir is None:
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    return args


def main(argv: list[str] | None = None) -> None:
    """Start the brokers the chosen systems need, measure, print the table, stop them."""
    args = _parse(argv)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {peers_setup.machine()}")
    print(f"load average before: {peers_setup.load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp_s:
        redis = Redis(Path(tmp_s)) if {"arq", "celery"} & set(args.systems) else None
        pg: PgServer | None = None
        if args.needs_pg:
            assert args.bindir is not None
            pg = peers_setup.StockPgServer.create(args.bindir)
        try:
            if pg is not None:
                pg.start()
                print(peers_setup.pg_settings(pg))
            for name in args.systems:
                print(f"- {system_settings(name, args.concurrency)}")
            if args.own_venvs:
                _own_venvs(args.systems)
            if args.pickup:
                print(
                    "- pickup: the same settings with workers that wait for work instead of "
                    "draining (arq burst off, procrastinate wait=True, PgQueuer continuous, "
                    "huey's and Celery's workers left running, ours drain = false)"
                )
                from bench.peers_pickup import pickup

                lines = pickup(args, redis, pg)
                skipped: dict[str, str] = {}
                kept_lines: list[str] = []
            else:
                runners = _runners(args.systems, redis, pg)
                kept_runners: dict[str, Runner] = {}
                if args.kept:
                    from bench.peers_kept import kept_runners as make_kept

                    assert pg is not None
                    kept_runners = make_kept(pg, args.kept, args.concurrency, POOL_SIZE)
                results, skipped = _measure(args, {**runners, **kept_runners})
                lines = table(args, results)
                kept_lines = []
                if kept_runners:
                    from bench.peers_kept import kept_table

                    kept_lines = kept_table(args, results)
        finally:
            if pg is not None:
                pg.destroy()
            if redis is not None:
                redis.stop()
    what = (
        f"pickup latency (submit -> executor start, one idle worker): {args.pickup} samples"
        if args.pickup
        else f"drain: {args.tasks} no-op tasks"
    )
    print(
        f"{what}, concurrency {args.concurrency}, {args.runs} interleaved round(s); "
        f"load average after: {peers_setup.load()}"
    )
    for line in lines + kept_lines:
        print(line)
    for name, why in skipped.items():
        print(f"{name}: skipped: {why}")


if __name__ == "__main__":
    main()
