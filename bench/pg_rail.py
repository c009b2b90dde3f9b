"""The PostgreSQL rail's own CPU per task, without a worker: its claims and reports alone.

    python -m bench.pg_rail [--tasks 3000] [--rounds 3] [--ab OLD_TREE] [--wal-kinds]
                            [--callgrind]

A worker's drain (:mod:`bench.postgres`) measures the worker process whole: the loop, the
executor, the leases' bookkeeping and the rail, ~190 us/task on 2 shared cores, its rounds
spread by +-5 us; a change of 2 us to the rail alone does not show there. This runs what a
busy worker asks of the rail, on the event loop (uvloop) as a worker does: ``claim_many`` of
10 under a fresh idempotency key, then ``finish_many`` of the 10 leases' ``complete``
transitions, each item keyed, until the role is drained; and prints the loop thread's CPU
(``time.thread_time``, which a wait for the server does not count) per task, split between the
claims and the reports (which carry the next batch's claim: docs/benchmarks/postgresql.md).
``--ab OLD_TREE`` runs the same calls from another source tree's ``tracker_client``
(its own schema), interleaved with this tree's, round by round, each tree first in every other
round; each run's schema is dropped after it. Each run is its own process on
a server started for the run (:class:`bench.peers_setup.StockPgServer`).

The server's side of the same drain (its seeded tasks analyzed first, as autovacuum does after
a submit): the CPU of its processes (user + system, from ``/proc``) and the WAL it wrote, read
back with ``pg_walinspect`` (records, bytes, full-page images and b-tree insertions per task;
``--wal-kinds`` adds each record kind's count per task). Unlike CPU, the WAL per task does not
move with the machine's load.

``--callgrind`` runs each tree's drain under ``valgrind --tool=callgrind`` instead and prints
the instructions the process executed per task between the drain's first claim and its last
report (the child calls ``zlib.crc32`` at both ends, where callgrind dumps its counters: the
seeding, the start-up and the server's readings are left out). Unlike CPU time, that count does
not move with the machine's load, so two trees compare on a busy machine (one round each is
enough); the server's figures are not read in that mode.

The child tunes the cyclic garbage collector as a ``run`` worker does once it runs
(:mod:`worker.cli.gc_tuning`: start-up's heap frozen, the youngest generation collected after
20,000 allocations), so the drain is measured in the worker's regime. Untuned, a full
collection of the whole heap (~18 M instructions) fell inside a 1,000-task drain or not
depending on how many objects the tree allocated before it: the same tree counted ~328k or
~346k instructions per task from run to run, which a change of a few thousand could not be
told from (a ``FinishItem`` as a named tuple read +14.7k that way; -5k measured so).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: What each run executes, in a process whose ``tracker_client`` is the measured tree's (so
#: nothing here imports from ``bench``: an older tree has its own, or none of this module).
CHILD = """
import gc, json, os, sys, time, zlib
import anyio
import psycopg
from tracker_client.contract.batch_models import FinishItem
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from tracker_client.rules.common import new_id

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "bench"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
COMPLETE = {"trigger": "complete"}


def server_cpu(pid):
    tick = os.sysconf("SC_CLK_TCK")

    def fields(p):
        with open(f"/proc/{p}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()

    total = sum(int(x) for x in fields(pid)[11:15])
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                child = fields(entry)
            except OSError:
                continue
            if int(child[1]) == pid:
                total += int(child[11]) + int(child[12])
    return total / tick


def server_mark(dsn, pid):
    with psycopg.connect(dsn, autocommit=True) as conn:
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
    return lsn, server_cpu(pid)


def wal_figures(dsn, start, stop):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_switch_wal()")  # the range flushed, so it can be read back
        rows = conn.execute(
            "SELECT resource_manager || '/' || record_type, count(*), "
            "count(*) FILTER (WHERE fpi_length > 0) "
            "FROM public.pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) GROUP BY 1",
            (start, stop),
        ).fetchall()
        size = conn.execute("SELECT %s::pg_lsn - %s::pg_lsn", (stop, start)).fetchone()[0]
    found = {"records": 0, "fpi": 0, "bytes": float(size), "btree_inserts": 0}
    kinds = {}
    for kind, count, fpi in rows:
        found["records"] += count
        found["fpi"] += fpi
        kinds[kind] = count
        if kind.startswith("Btree/INSERT"):
            found["btree_inserts"] += count
    return found, kinds


async def seed(url, n):
    tracker = await open_tracker(url)
    try:
        pipeline = await tracker.create_pipeline("bench", PIPELINE)
        for start in range(0, n, 500):
            stop = min(n, start + 500)
            batch = [TaskCreate(pipeline_id=pipeline, title=f"t{i}") for i in range(start, stop)]
            await tracker.create_tasks(batch)
    finally:
        await tracker.aclose()


async def main(url, n, dsn, server_pid, schema):
    await seed(url, n)
    with psycopg.connect(dsn, autocommit=True) as conn:  # as autovacuum would after the submit
        conn.execute(f"ANALYZE {schema}.tasks")
    tracker = await open_tracker(url)
    try:
        mark = server_mark(dsn, server_pid)
        done, claims, reports = 0, 0.0, 0.0
        # the collector as a `run` worker tunes it once running (worker/cli/gc_tuning.py): the
        # heap so far frozen, the youngest generation collected after 20,000 allocations
        gc.freeze()
        gc.set_threshold(20_000, *gc.get_threshold()[1:])
        zlib.crc32(b"drain")  # under callgrind (--callgrind), its counters dumped here
        while True:
            began = time.thread_time()
            leases = await tracker.claim_many("a1", "bench", 30000, 10, idempotency_key=new_id())
            claims += time.thread_time() - began
            if not leases:
                break
            items = [
                FinishItem(lease=lease.ref, transition=COMPLETE, idempotency_key=new_id())
                for lease in leases
            ]
            began = time.thread_time()
            out = await tracker.finish_many(items)
            reports += time.thread_time() - began
            bad = [o for o in out if isinstance(o, Exception)]
            if bad:
                raise SystemExit(f"a report was refused: {bad[0]!r}")
            done += len(leases)
        zlib.crc32(b"drained")  # ... and here
        stop = server_mark(dsn, server_pid)
    finally:
        await tracker.aclose()
    wal, kinds = wal_figures(dsn, mark[0], stop[0])
    return {
        "kinds": {k: v / done for k, v in kinds.items()},
        "done": done, "claim_us": claims / done * 1e6, "report_us": reports / done * 1e6,
        "server_us": (stop[1] - mark[1]) / done * 1e6,
        **{f"wal_{k}": v / done for k, v in wal.items()},
    }


found = anyio.run(
    main, sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5],
    backend_options={"use_uvloop": True},
)
print(json.dumps(found))
"""


def run_once(
    server_url: str, server_pid: int, tasks: int, tree: Path, callgrind: Path | None = None
) -> dict[str, Any]:
    """One run of :data:`CHILD` with ``tree`` 's ``tracker_client`` on a fresh schema;
    ``callgrind``: under callgrind, its dumps written in that directory (``instructions``:
    the drain's per task, see the module docstring)."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = f"{server_url}?schema={schema}"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a worker (bench.worker.worker_env)
    argv = [sys.executable, "-c", CHILD, url, str(tasks), server_url, str(server_pid), schema]
    out = None
    if callgrind is not None:
        from bench import callgrind as counted

        out = callgrind / f"cg-{uuid.uuid4().hex[:8]}"
        argv = [*counted.command(out), *argv]
    done = subprocess.run(
        argv,
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the run of {tree} failed:\n{done.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        # gone, so no autovacuum of its tables lands in a later run's server CPU
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    if found["done"] != tasks:
        raise SystemExit(f"the run of {tree} finished {found['done']} of {tasks} tasks")
    if out is not None:  # dump 1: up to the drain; dump 2: the drain (see the module)
        from bench.callgrind import totals

        found["instructions"] = totals(Path(f"{out}.2")) / tasks
    return found


def main() -> None:
    """Run the rounds and print one row per tree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree (median)")
    parser.add_argument("--ab", type=Path, default=None, help="an older tree, interleaved")
    parser.add_argument(
        "--wal-kinds", action="store_true", help="also the WAL records per task by kind"
    )
    parser.add_argument(
        "--callgrind", action="store_true", help="instructions per task (valgrind) instead"
    )
    args = parser.parse_args()
    if args.tasks < 1 or args.rounds < 1:
        parser.error("--tasks and --rounds: at least 1")
    trees = [ROOT]
    if args.ab is not None:
        if not (args.ab / "tracker_client" / "postgres").is_dir():
            parser.error(f"--ab {args.ab}: not a source tree with tracker_client/postgres")
        trees.append(args.ab.resolve())
    import psycopg

    from bench.peers_setup import StockPgServer, load
    from tests.postgres.server import find_bindir

    bindir = find_bindir()
    if bindir is None:
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    if args.callgrind and shutil.which("valgrind") is None:
        parser.error("--callgrind: valgrind is not installed (apt-get install valgrind)")
    runs: list[list[dict[str, Any]]] = [[] for _ in trees]
    server = StockPgServer.create(bindir)
    dumps = server.root / "callgrind" if args.callgrind else None
    if dumps is not None:
        dumps.mkdir()
    began = f"load {load()} at {time.strftime('%H:%M:%S', time.gmtime())} UTC"
    try:
        server.start()
        assert server.proc is not None
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA public")
        for round_no in range(args.rounds):
            order = list(zip(trees, runs, strict=True))
            if round_no % 2:
                order.reverse()  # each tree runs first in every other round
            for tree, rows in order:
                rows.append(run_once(server.url, server.proc.pid, args.tasks, tree, dumps))
    finally:
        server.destroy()
    print(
        f"{args.tasks} tasks, claim_many of 10 and finish_many of 10, {args.rounds} round(s); "
        f"{began}, load {load()} at {time.strftime('%H:%M:%S', time.gmtime())} UTC"
    )
    if dumps is not None:
        print("| tree | instructions/task (callgrind) | per round |")
        print("| --- | --- | --- |")
        for tree, rows in zip(trees, runs, strict=True):
            counts = [r["instructions"] for r in rows]
            spread = ", ".join(f"{c:,.0f}" for c in counts)
            print(f"| {tree} | {statistics.median(counts):,.0f} | {spread} |")
        return
    print(
        "| tree | claims us/task | reports us/task | rail us/task | rail us/task per round "
        "| server CPU us/task | per round | WAL records/task | WAL bytes/task "
        "| full-page images/task | b-tree insertions/task |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for tree, rows in zip(trees, runs, strict=True):
        each = [r["claim_us"] + r["report_us"] for r in rows]
        server_rounds = ", ".join(f"{r['server_us']:.0f}" for r in rows)

        def median(key: str, rows: list[dict[str, Any]] = rows) -> float:
            return float(statistics.median(r[key] for r in rows))

        print(
            f"| {tree} | {median('claim_us'):.1f} | {median('report_us'):.1f} | "
            f"{statistics.median(each):.1f} | {', '.join(f'{v:.1f}' for v in each)} | "
            f"{median('server_us'):.0f} | {server_rounds} | "
            f"{median('wal_records'):.1f} | "
            f"{median('wal_bytes'):.0f} | {median('wal_fpi'):.2f} | "
            f"{median('wal_btree_inserts'):.1f} |"
        )
    if args.wal_kinds:
        kinds = sorted({k for rows in runs for r in rows for k in r["kinds"]})
        print()
        print("| WAL records/task by kind | " + " | ".join(str(t) for t in trees) + " |")
        print("| --- |" + " --- |" * len(trees))
        for kind in kinds:
            cells = [statistics.median(r["kinds"].get(kind, 0.0) for r in rows) for rows in runs]
            print(f"| {kind} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
