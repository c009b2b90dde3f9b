"""The same-run peer benchmark: arq, Celery, huey, procrastinate and PgQueuer beside this
worker on each of its rails.

    python -m bench.peers [--tasks 5000] [--concurrency 10] [--runs 3] [--procs 1,2]
                          [--systems arq,celery,huey,procrastinate,pgqueuer,embedded,...]
                          [--kept 1000,200000] [--pickup SAMPLES] [--own-venvs]
                          [--log-level WARNING[,INFO]]

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

``embedded@TREE``, ``served@TREE``, ``postgres@TREE`` (``--systems embedded,embedded@/tmp/base``):
the same rail run by the source tree ``TREE`` (a ``git worktree`` of an older commit), its
seeding, its ``tracker serve`` and its workers, in the same rounds as this tree's: a
before/after measured under the same load. Its row is set beside the same best peer.

Every round runs every system (with 1 process, then 2 ...), the systems' order rotating from
round to round and reversed every other round (:func:`round_order`), so a machine's load drifts
over all of them alike and two neighbours run in both orders. Throughput is the queue's
own timestamps (first start -> last finish; huey and Celery keep none, so their workers' own
clocks), so
process start-up is excluded; peak RSS is the max over the worker processes of their own
``VmHWM`` (:mod:`bench.rss`), CPU per task the user + system time of the worker processes from
``wait4`` (start-up included; brokers and ``tracker serve`` not counted: the served rows'
``tracker serve`` CPU per task, and its event loop's share, are printed under the table,
:func:`server_lines`). Each system is set
beside the best peer of its storage class (SQLite: huey; PostgreSQL: the faster of
procrastinate and PgQueuer by median tasks/s; Redis: the faster of arq and Celery) and
beside arq: the ratios are
medians of each round's ratio (CPU per task is the figure a loaded machine moves least, for
every system but huey, whose CPU per task more than doubles on an idle machine: below). The
header prints the machine, its load average before and after, the PostgreSQL server's
settings (``SHOW``), every worker's log level and every system's settings (each peer's read
on the interpreter its workers run on, huey's storage pragmas read back from a connection).

The machine is shared, so each row also says what it ran under (:mod:`bench.peers_setup`):
the share of the machine's CPU left idle during the system's runs and its worker processes'
voluntary context switches per task, median [range] over the rounds; and a fixed CPU-bound
loop is timed before and after each round (the calibration line), so a slower core shows.
huey's rate depends on it: on an otherwise idle machine (a core free for each thread woken)
its 10 threads hand their one lock to each other (~5 switches per task, ~45 % of this 2-core
machine left idle) and it drains about half as fast as when other work keeps the second core
busy (under 1 switch per task).

``--log-level LEVEL`` (default WARNING, as every figure on the Benchmarks page) sets every
worker's level, ours and the peers'; ``--log-level WARNING,INFO`` runs each system at each
level in every round and adds a table of each level's cost (:mod:`bench.peers_levels`).
``tracker serve`` keeps its own default (INFO, its per-task lines off).

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
import os
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
from bench.peer_workers import DEFAULT_LOG_LEVEL
from bench.peers_levels import MARK, level_table, parse_levels, per_level, set_level, split
from bench.postgres import _config, _pg_drain
from bench.remote import _start_server
from bench.worker import _drain, _seed, _seed_with, _spawn
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
#: This project's rails: each also runs from another source tree as ``RAIL@TREE``.
OURS = ("embedded", "served", "postgres")
#: The PostgreSQL rail's connections per worker process.
POOL_SIZE = 4


# -- this project's served rail -------------------------------------------------------------------
def served_drain(n: int, procs: int, concurrency: int, root: Path | None = None) -> Result:
    """The worker through ``tracker serve`` (its own SQLite file) drains ``n`` no-op tasks;
    seeding, server and workers all of the source tree ``root`` when given."""
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "served.db"
        if root is None:
            anyio.run(_seed, db, n)
        else:
            _seed_with(root, db, n)
        server, url = _start_server(db, root)
        try:
            config = _config(tmp, url, concurrency)
            server_before = server_cpu_s(server.pid)
            workers = [_spawn(config, root) for _ in range(procs)]
            conditions = peers_setup.Conditions.start()
            reaped = _reap(workers)
            _, switches = conditions.stop()  # the workers' own, before the server is reaped
            server_after = server_cpu_s(server.pid)
        finally:
            server.terminate()
            server.wait(30)
        with sqlite3.connect(db) as conn:
            first, last, done = conn.execute(
                "SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM runs "
                "WHERE status = 'completed'"
            ).fetchone()
        result = _result(workers, reaped, done, (first or 0) / 1000, (last or 0) / 1000)
        result["switches"] = switches
        if done:
            loop, total = (b - a for a, b in zip(server_before, server_after, strict=True))
            result["server_us_per_task"] = total / done * 1e6
            result["server_loop_us_per_task"] = loop / done * 1e6
        return result


def server_cpu_s(pid: int) -> tuple[float, float]:
    """(its main thread's, the whole process's) CPU seconds so far of ``tracker serve``
    (``pid``): user + system, from ``/proc``. The main thread runs the event loop (HTTP,
    JSON, the routes); the rest is the database thread, the WAL checkpointer and any thread
    gone meanwhile (the process's own count keeps an exited thread's time)."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu(path: str) -> float:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return cpu(f"/proc/{pid}/task/{pid}/stat"), cpu(f"/proc/{pid}/stat")


def server_lines(results: dict[tuple[str, int], list[Result]]) -> list[str]:
    """What ``tracker serve`` spent per task beside each served row (the CPU column counts
    worker processes only, and on 2 cores the server's CPU bounds the rate too): median
    [range] over the rounds, and the share of it on its event loop."""
    lines = []
    for (name, procs), rows in results.items():
        totals = [r["server_us_per_task"] for r in rows if "server_us_per_task" in r]
        if not totals:
            continue
        loop = statistics.median(r["server_loop_us_per_task"] for r in rows)
        lines.append(
            f"- {name} x{procs}: tracker serve {statistics.median(totals):.0f} "
            f"[{min(totals):.0f}-{max(totals):.0f}] us/task of CPU, {loop:.0f} of it on its "
            "event loop (HTTP, JSON, routes), the rest its database thread and checkpointer"
        )
    if lines:
        lines.insert(0, "tracker serve's own CPU per task (not in the CPU column above):")
    return lines


# -- settings -------------------------------------------------------------------------------------
def _redis_version() -> str:
    done = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    words = done.stdout.split()
    return next((w.removeprefix("v=") for w in words if w.startswith("v=")), "?")


def _peer_settings(name: str, concurrency: int) -> str:
    """The peer's own settings line, read on the interpreter its workers run on (its venv of
    its own under ``--own-venvs``): the versions printed are the ones measured."""
    from bench import peer_drains

    python = peer_drains.PYTHONS.get(name, sys.executable)
    done = subprocess.run(
        [python, "-m", "bench.peer_workers", "settings", name, str(concurrency)],
        env={**os.environ, "PYTHONPATH": str(peer_drains.ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"{name}: its settings could not be read on {python}: {last}"
    return done.stdout.strip()


def system_settings(name: str, concurrency: int, log_level: str = DEFAULT_LOG_LEVEL) -> str:
    """One line saying how ``name`` runs in this benchmark."""
    rail, _, tree = name.partition("@")
    if tree:
        return f"{name}: {system_settings(rail, concurrency, log_level)}, source tree {tree}"
    if name == "arq":
        return (
            f"{_peer_settings(name, concurrency)}; redis-server {_redis_version()} (--save '' "
            "--appendonly no)"
        )
    if name in PEERS:
        return _peer_settings(name, concurrency)
    ours = (
        f"python -m worker run, concurrency {concurrency}, no-op python executor, log_level "
        f"{log_level}"
    )
    if name == "embedded":
        return f"embedded: {ours}, SQLite file (WAL, synchronous=NORMAL)"
    if name == "served":
        return (
            f"served: {ours}, through tracker serve (HTTP, 127.0.0.1; its own log at its "
            "default, INFO without per-task lines) on a SQLite file"
        )
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

    def postgres(n: int, p: int, c: int, root: Path | None = None) -> Result:
        assert pg is not None
        return _pg_drain(pg, n, p, c, POOL_SIZE, root)

    def of_tree(rail: str, tree: Path) -> Runner:
        """``rail`` run by the source tree ``tree`` (seeding, server and workers)."""
        if rail == "embedded":
            return lambda n, p, c: _drain(n, p, c, tree)
        if rail == "served":
            return lambda n, p, c: served_drain(n, p, c, tree)
        return lambda n, p, c: postgres(n, p, c, tree)

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
    return {
        name: known[name] if name in known else of_tree(*_tree_system(name)) for name in systems
    }


def _tree_system(name: str) -> tuple[str, Path]:
    """``embedded@/tmp/base`` -> ``("embedded", Path("/tmp/base").resolve())``."""
    rail, _, tree = name.partition("@")
    return rail, Path(tree).resolve()


Calibration = tuple[tuple[float, float], tuple[float, float]]
#: Printed under the table: what its last two columns mean and why they are there.
CONDITIONS_LEGEND = (
    "machine idle %: the machine's CPU left idle while the system ran (its seeding and drain, "
    "/proc/stat); switches/task: its worker processes' voluntary context switches per task. "
    "A consumer whose threads share one lock (huey) drains about half as fast, at ~5 "
    "switches/task, on an otherwise idle machine: read its rounds against these columns.",
)


def round_order(names: list[str], run: int) -> list[str]:
    """The systems' order in round ``run``: rotated by one each round, and reversed in every
    other round, so two systems listed side by side (a tree and its older self) run in both
    orders. Rotation alone kept each such pair in one order in every round: in the fourteenth
    round the PostgreSQL rail with 2 processes always ran right before its older self and read
    0.80x against 1.05x PgQueuer; alone, the order alternating, the two were level
    (docs/benchmarks.md)."""
    shift = run % len(names)
    order = names[shift:] + names[:shift]
    return order[::-1] if run % 2 else order


def _measure(
    args: argparse.Namespace, runners: dict[str, Runner]
) -> tuple[dict[tuple[str, int], list[Result]], dict[str, str], list[Calibration]]:
    """Every (system, procs) ``args.runs`` times, interleaved (:func:`round_order`); a system
    that fails is skipped from then on with the reason. Each result also holds the machine's
    idle share during it and its workers' voluntary context switches
    (:class:`bench.peers_setup.Conditions`); each round is framed by a calibration loop
    (:func:`bench.peers_setup.calibrate`), returned as (before, after) per round."""
    results: dict[tuple[str, int], list[Result]] = {}
    skipped: dict[str, str] = {}
    calibrations: list[Calibration] = []
    names = list(runners)
    for run in range(args.runs):
        order = round_order(names, run)
        before = peers_setup.calibrate()
        for procs in args.procs:
            for name in order:
                if name in skipped:
                    continue
                conditions = peers_setup.Conditions.start()
                try:
                    r = runners[name](args.tasks, procs, args.concurrency)
                except Exception as exc:  # a rail being built may not open: say why, go on
                    skipped[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                    traceback.print_exc(limit=3, file=sys.stderr)
                    continue
                idle, switches = conditions.stop()
                if r["done"] != args.tasks:
                    skipped[name] = f"drained {r['done']} of {args.tasks} (exit {r['exit_codes']})"
                    continue
                r["round"] = run
                r["idle_pct"] = idle
                r["switches_per_task"] = r.get("switches", switches) / r["done"]
                results.setdefault((name, procs), []).append(r)
                server = (
                    f", tracker serve {r['server_us_per_task']:.0f} us/task "
                    f"({r['server_loop_us_per_task']:.0f} on its event loop)"
                    if "server_us_per_task" in r
                    else ""
                )
                print(
                    f"  round {run + 1} {name} x{procs}: {r['tasks_per_s']:.0f} tasks/s, "
                    f"{r['peak_rss_mib']:.1f} MiB, {r['cpu_us_per_task']:.0f} us/task, "
                    f"{r['switches_per_task']:.1f} switches/task, machine {idle:.0f} % idle"
                    f"{server}",
                    file=sys.stderr,
                    flush=True,
                )
        after = peers_setup.calibrate()
        calibrations.append((before, after))
        print(
            f"  round {run + 1} calibration: {_calibration(before)} before, "
            f"{_calibration(after)} after",
            file=sys.stderr,
            flush=True,
        )
    return results, skipped, calibrations


def _calibration(reading: tuple[float, float]) -> str:
    cpu, wall = reading
    return f"{cpu:.0f} ms CPU ({wall:.0f} ms wall)"


def calibration_line(calibrations: list[Calibration]) -> str:
    """The calibration loop's spread over the run: CPU ms (the core's speed) and wall ms (the
    wait for a core), min-max over every reading before and after each round."""
    readings = [reading for pair in calibrations for reading in pair]
    cpu = [c for c, _ in readings]
    wall = [w for _, w in readings]
    return (
        f"calibration ({peers_setup.CALIBRATION_LOOPS:,} Python additions, before and after "
        f"each round): {min(cpu):.0f}-{max(cpu):.0f} ms CPU, {min(wall):.0f}-{max(wall):.0f} "
        "ms wall"
    )


def ratio(rows: list[Result], base: list[Result], key: str) -> float | None:
    """The median over rounds of ``rows``' ``key`` over ``base``'s in the same round."""
    by_round = {r["round"]: r[key] for r in base}
    ratios = [r[key] / by_round[r["round"]] for r in rows if by_round.get(r["round"])]
    return statistics.median(ratios) if ratios else None


def _spread(values: list[float], spec: str) -> str:
    """``median [min-max]`` of ``values``, each formatted with ``spec``."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:{spec}} [{low:{spec}}-{high:{spec}}]"


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
    """The results as Markdown table lines: medians over the rounds, ratios as medians of
    per-round ratios (:func:`ratio`), and the conditions each system ran under (the machine's
    idle share, its workers' voluntary context switches per task: :mod:`bench.peers_setup`).
    With several log levels (``args.log_levels``) each system has a row per level, set beside
    the best peer at the same level (:mod:`bench.peers_levels`)."""
    lines = [
        "| system | storage | procs | tasks/s [range] | peak RSS MiB | CPU us/task "
        "| best same-storage peer | x peer tasks/s | x peer CPU/task | x peer RSS "
        "| x arq tasks/s | machine idle % [range] | switches/task [range] |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    by_level: dict[str | None, dict[tuple[str, int], list[Result]]] = {}
    for (label, procs), measured in results.items():
        name, level = split(label)
        by_level.setdefault(level, {})[(name, procs)] = measured
    levels = [lv for lv in (None, *args.log_levels) if lv in by_level]
    # each system, then its runs from other source trees (RAIL@TREE) in the order measured
    trees = list(dict.fromkeys(split(label)[0] for label, _ in results if "@" in label))
    names = [
        system
        for name in SYSTEMS
        for system in [name, *(t for t in trees if t.partition("@")[0] == name)]
    ]
    for procs in args.procs:
        for name in names:
            for level in levels:
                group = by_level[level]
                rows = group.get((name, procs))
                if rows:
                    label = name if level is None else f"{name}{MARK}{level}"
                    storage = STORAGE[name.partition("@")[0]]
                    lines.append(_row(label, storage, procs, rows, group))
    return lines


def _row(
    label: str,
    storage: str,
    procs: int,
    rows: list[Result],
    group: dict[tuple[str, int], list[Result]],
) -> str:
    """One system's row: ``rows`` are its rounds, ``group`` every system's at its log level."""
    tps = [r["tasks_per_s"] for r in rows]
    rss = statistics.median(r["peak_rss_mib"] for r in rows)
    cpu = statistics.median(r["cpu_us_per_task"] for r in rows)
    idle = [r["idle_pct"] for r in rows]
    switches = [r["switches_per_task"] for r in rows]
    peer = best_peer(group, storage, procs)
    base = group.get((peer, procs), []) if peer else []
    arq_rows = group.get(("arq", procs), [])
    return (
        f"| {label} | {storage} | {procs} | {statistics.median(tps):.0f} "
        f"[{min(tps):.0f}-{max(tps):.0f}] | {rss:.1f} | {cpu:.0f} | {peer or '-'} | "
        f"{_fmt(ratio(rows, base, 'tasks_per_s'))} | "
        f"{_fmt(ratio(rows, base, 'cpu_us_per_task'))} | "
        f"{_fmt(ratio(rows, base, 'peak_rss_mib'))} | "
        f"{_fmt(ratio(rows, arq_rows, 'tasks_per_s'))} | {_spread(idle, '.0f')} | "
        f"{_spread(switches, '.1f')} |"
    )


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
        "--log-level",
        default=DEFAULT_LOG_LEVEL,
        metavar="LEVELS",
        help="the level every worker logs at, ours and the peers' (default: WARNING); several "
        "(WARNING,INFO) run each system at each, interleaved in every round, to read what a "
        "level costs (INFO is this worker's own default)",
    )
    parser.add_argument(
        "--pickup",
        type=int,
        default=0,
        metavar="SAMPLES",
        help="measure pickup latency (submit -> executor start, idle worker) instead",
    )
    parser.add_argument(
        "--alternate",
        action="store_true",
        help="with --pickup: every system's idle worker at once, samples taken in turns "
        "(a before/after under the same load; no CPU figures)",
    )
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    # RAIL@TREE: one of this project's rails run by another source tree (a before/after in
    # the same rounds), with --pickup too (bench.peers_pickup)
    trees = OURS
    unknown = sorted(
        s for s in args.systems if s not in SYSTEMS and s.partition("@")[0] not in trees
    )
    if unknown:
        known = ", ".join([*SYSTEMS, *(f"{rail}@TREE" for rail in trees)])
        parser.error(f"unknown system(s) {', '.join(unknown)}; known: {known}")
    not_trees = sorted(
        s
        for s in args.systems
        if "@" in s and not (Path(s.partition("@")[2]) / "worker" / "__main__.py").is_file()
    )
    if not_trees:
        parser.error(
            f"not a source tree of this project (no worker/__main__.py): {', '.join(not_trees)}"
        )
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
    try:
        args.log_levels = parse_levels(args.log_level)
    except ValueError as exc:
        parser.error(str(exc))
    args.log_level = args.log_levels[0]
    if len(args.log_levels) > 1 and (args.kept or args.pickup):
        parser.error("--log-level: several levels measure the drains only, not --kept or --pickup")
    kinds = {s.partition("@")[0] for s in args.systems}
    args.needs_pg = bool({"procrastinate", "pgqueuer", "postgres"} & kinds or args.kept)
    args.bindir = find_bindir()
    if args.needs_pg and args.bindir is None:
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    return args


def main(argv: list[str] | None = None) -> None:
    """Start the brokers the chosen systems need, measure, print the table, stop them."""
    args = _parse(argv)
    set_level(args.log_level)  # every worker spawned inherits it (bench.peers_levels)
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
            if args.own_venvs:  # first: each peer's settings are read on its own venv
                _own_venvs(args.systems)
            if len(args.log_levels) > 1:
                print(
                    f"- log level: each system at each of {', '.join(args.log_levels)}, "
                    "interleaved in every round, ours and the peers' alike"
                )
            else:
                print(f"- log level: {args.log_level} for every worker, ours and the peers'")
            for name in args.systems:
                print(f"- {system_settings(name, args.concurrency, args.log_level)}")
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
                if len(args.log_levels) > 1:
                    runners = per_level(runners, args.log_levels)
                kept_runners: dict[str, Runner] = {}
                if args.kept:
                    from bench.peers_kept import kept_runners as make_kept

                    assert pg is not None
                    kept_runners = make_kept(pg, args.kept, args.concurrency, POOL_SIZE)
                results, skipped, calibrations = _measure(args, {**runners, **kept_runners})
                lines = [*table(args, results), "", *CONDITIONS_LEGEND]
                lines.append(calibration_line(calibrations))
                lines += server_lines(results)
                if len(args.log_levels) > 1:
                    systems = [name for name in SYSTEMS if name in args.systems]
                    lines += level_table(systems, args.log_levels, args.procs, results)
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
