"""The PostgreSQL rail's own CPU per task, without a worker: its claims and reports alone.

    python -m bench.pg_rail [--tasks 3000] [--rounds 3] [--ab OLD_TREE]

A worker's drain (:mod:`bench.postgres`) measures the worker process whole: the loop, the
executor, the leases' bookkeeping and the rail, ~190 us/task on 2 shared cores, its rounds
spread by +-5 us; a change of 2 us to the rail alone does not show there. This runs what a
busy worker asks of the rail, on the event loop (uvloop) as a worker does: ``claim_many`` of
10 under a fresh idempotency key, then ``finish_many`` of the 10 leases' ``complete``
transitions, each item keyed, until the role is drained; and prints the loop thread's CPU
(``time.thread_time``, which a wait for the server does not count) per task, split between the
claims and the reports (which carry the next batch's claim: docs/benchmarks.md, "PostgreSQL
rail"). ``--ab OLD_TREE`` runs the same calls from another source tree's ``tracker_client``
(its own schema), interleaved with this tree's, round by round. Each run is its own process on
a server started for the run (:class:`bench.peers_setup.StockPgServer`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: What each run executes, in a process whose ``tracker_client`` is the measured tree's (so
#: nothing here imports from ``bench``: an older tree has its own, or none of this module).
CHILD = """
import json, sys, time
import anyio
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


async def main(url, n):
    tracker = await open_tracker(url)
    try:
        pid = await tracker.create_pipeline("bench", PIPELINE)
        for start in range(0, n, 500):
            stop = min(n, start + 500)
            batch = [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(start, stop)]
            await tracker.create_tasks(batch)
        done, claims, reports = 0, 0.0, 0.0
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
    finally:
        await tracker.aclose()
    return {"done": done, "claim_us": claims / done * 1e6, "report_us": reports / done * 1e6}


found = anyio.run(main, sys.argv[1], int(sys.argv[2]), backend_options={"use_uvloop": True})
print(json.dumps(found))
"""


def run_once(server_url: str, tasks: int, tree: Path) -> dict[str, Any]:
    """One run of :data:`CHILD` with ``tree`` 's ``tracker_client`` on a fresh schema."""
    url = f"{server_url}?schema=bench_{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a worker (bench.worker.worker_env)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(tasks)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the run of {tree} failed:\n{done.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if found["done"] != tasks:
        raise SystemExit(f"the run of {tree} finished {found['done']} of {tasks} tasks")
    return found


def main() -> None:
    """Run the rounds and print one row per tree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree (median)")
    parser.add_argument("--ab", type=Path, default=None, help="an older tree, interleaved")
    args = parser.parse_args()
    if args.tasks < 1 or args.rounds < 1:
        parser.error("--tasks and --rounds: at least 1")
    trees = [ROOT]
    if args.ab is not None:
        if not (args.ab / "tracker_client" / "postgres").is_dir():
            parser.error(f"--ab {args.ab}: not a source tree with tracker_client/postgres")
        trees.append(args.ab.resolve())
    from bench.peers_setup import StockPgServer
    from tests.postgres.server import find_bindir

    bindir = find_bindir()
    if bindir is None:
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    runs: list[list[dict[str, Any]]] = [[] for _ in trees]
    server = StockPgServer.create(bindir)
    try:
        server.start()
        for _ in range(args.rounds):
            for tree, rows in zip(trees, runs, strict=True):
                rows.append(run_once(server.url, args.tasks, tree))
    finally:
        server.destroy()
    print(f"{args.tasks} tasks, claim_many of 10 and finish_many of 10, {args.rounds} round(s)")
    print("| tree | claims us/task | reports us/task | rail us/task | rail us/task per round |")
    print("| --- | --- | --- | --- | --- |")
    for tree, rows in zip(trees, runs, strict=True):
        each = [r["claim_us"] + r["report_us"] for r in rows]
        print(
            f"| {tree} | {statistics.median(r['claim_us'] for r in rows):.1f} | "
            f"{statistics.median(r['report_us'] for r in rows):.1f} | "
            f"{statistics.median(each):.1f} | {', '.join(f'{v:.1f}' for v in each)} |"
        )


if __name__ == "__main__":
    main()
