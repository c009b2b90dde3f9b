"""Create throughput on the PostgreSQL rail: this tree against another, in one run.

    python -m bench.pg_create [--tasks 1000] [--concurrency 8] [--rounds 3] [--ab OLD_TREE]

Each round runs a creator process per tree (``--ab``: that tree's ``tracker_client``, its
seeding and schema too), interleaved, on a PostgreSQL started for the run at its stock
durability (:class:`bench.peers_setup.StockPgServer`). A creator opens the rail on a fresh
schema, warms up (the pipeline, a few creates), then sends ``--tasks`` ``create_task`` calls,
``--concurrency`` at once. Printed per tree: creates/s, the creator's CPU per create, and the
server's own CPU per create (its processes' user + system time over the creates alone).
Medians of the rounds, with every round's creates/s. A benchmark, not a test: it checks only
that the rail holds every task created (docs/benchmarks/postgresql.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent


async def _creator(url: str, n: int, concurrency: int) -> dict[str, float]:
    """In a creator process (``tracker_client`` from its tree): ready, go, ``n`` creates."""
    import anyio
    import psycopg

    from tracker_client.factory import open_tracker
    from tracker_client.models import TaskCreate

    pipeline = {
        "initial": "todo",
        "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
        "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
    }
    schema = f"c_{uuid.uuid4().hex[:10]}"
    tracker = await open_tracker(f"{url}?schema={schema}")
    try:
        pid = await tracker.create_pipeline("bench", pipeline)
        for i in range(2 * concurrency):
            await tracker.create_task(TaskCreate(pipeline_id=pid, title=f"warm {i}"))
        print("ready", flush=True)
        sys.stdin.readline()
        cpu0, t0 = time.process_time(), time.perf_counter()

        async def creates(numbers: range) -> None:
            for i in numbers:
                await tracker.create_task(TaskCreate(pipeline_id=pid, title=f"t{i}"))

        async with anyio.create_task_group() as tg:
            for k in range(concurrency):
                tg.start_soon(creates, range(k, n, concurrency))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await tracker.aclose()
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {schema}.tasks").fetchone()
    held = -1 if row is None else int(row[0])
    if held != n + 2 * concurrency:
        raise SystemExit(f"the rail holds {held} tasks, {n + 2 * concurrency} created")
    return {"creates_per_s": n / wall, "cpu_us": cpu / n * 1e6}


def _round(tree: Path, server: Any, args: argparse.Namespace) -> dict[str, float]:
    """One creator of ``tree`` on ``server``: its figures and the server's CPU per create."""
    from bench.postgres import _server_cpu_s

    env = dict(os.environ, PYTHONPATH=str(tree))
    command = [sys.executable, str(HERE), "--creator", server.url, str(args.tasks)]
    command.append(str(args.concurrency))
    with subprocess.Popen(
        command, env=env, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"the creator of {tree} did not start")
        before = _server_cpu_s(server)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        found: dict[str, float] = json.loads(proc.stdout.readline())
        found["server_us"] = (_server_cpu_s(server) - before) / args.tasks * 1e6
    if proc.returncode:
        raise SystemExit(f"the creator of {tree} exited {proc.returncode}")
    return found


def main() -> None:
    """Run the rounds and print one table row per tree."""
    if len(sys.argv) == 5 and sys.argv[1] == "--creator":
        import anyio

        url, n, concurrency = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(anyio.run(_creator, url, n, concurrency)), flush=True)
        return
    from bench.peers_setup import StockPgServer, pg_settings
    from tests.postgres.server import find_bindir

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ab", type=Path, default=None, help="an older tree, interleaved")
    args = parser.parse_args()
    if args.tasks < 1 or args.concurrency < 1 or args.rounds < 1:
        parser.error("--tasks, --concurrency and --rounds: at least 1")
    trees = [("this", ROOT)]
    if args.ab is not None:
        if not (args.ab / "tracker_client" / "postgres").is_dir():
            parser.error(f"--ab {args.ab}: not a source tree with tracker_client/postgres")
        trees.append(("ab", args.ab.resolve()))
    bindir = find_bindir()
    if bindir is None:
        parser.error("PostgreSQL is not installed: apt-get install postgresql")
    runs: dict[str, list[dict[str, float]]] = {f"{label}: {t}": [] for label, t in trees}
    server = StockPgServer.create(bindir)
    try:
        server.start()
        print(pg_settings(server))
        for r in range(args.rounds):
            for label, tree in trees if r % 2 == 0 else trees[::-1]:
                runs[f"{label}: {tree}"].append(_round(tree, server, args))
    finally:
        server.destroy()
    print("| tree | creates/s | creator CPU us/create | server CPU us/create | per round |")
    print("| --- | --- | --- | --- | --- |")
    for shown, rows in runs.items():

        def median(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(r[key] for r in rows)

        each = ", ".join(f"{r['creates_per_s']:.0f}" for r in rows)
        print(
            f"| {shown} | {median('creates_per_s'):.0f} | {median('cpu_us'):.0f} | "
            f"{median('server_us'):.0f} | {each} |"
        )


if __name__ == "__main__":
    main()
