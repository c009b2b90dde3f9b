"""What the live worker registry costs on the embedded rail: one refresh, one listing.

    python -m bench.workers [--workers 100] [--leases 1000] [--refreshes 500]

A fresh rail file with ``--workers`` registered workers (one agent id each) holding
``--leases`` live leases between them; then ``--refreshes`` refreshes (the upsert a worker sends
every ``lost_after_s / 4``) and 20 listings (``backlog-worker workers``) are timed. A benchmark,
not a test: it prints the figures and exits 0.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


def _body(n: int) -> dict[str, Any]:
    return {
        "host": "bench",
        "pid": n + 1,
        "version": "bench",
        "roles": ["coder"],
        "slots": 10,
        "agent_id": f"agent-{n}",
        "started_at_ms": 1,
        "lost_after_ms": 60_000,
        "run_ids": [],
    }


async def run(workers: int, leases: int, refreshes: int) -> None:
    """Seed the rail, time the refreshes and the listings, print the figures."""
    with tempfile.TemporaryDirectory() as tmp:
        tracker = await open_tracker(f"sqlite:///{Path(tmp) / 'rail.db'}")
        try:
            pid = await tracker.create_pipeline("bench", PIPELINE)
            if leases:
                titles = [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(leases)]
                await tracker.create_tasks(titles)
            for n in range(workers):
                await tracker.call("register_worker", f"w{n}", **_body(n))
            for i in range(leases):
                await tracker.claim(f"agent-{i % workers}", "coder", 600_000)
            started = time.perf_counter()
            for i in range(refreshes):
                await tracker.call("register_worker", f"w{i % workers}", **_body(i % workers))
            refresh_ms = (time.perf_counter() - started) / refreshes * 1000
            started = time.perf_counter()
            for _ in range(20):
                listed = await tracker.call("list_workers")
            list_ms = (time.perf_counter() - started) / 20 * 1000
        finally:
            await tracker.aclose()
    running = sum(len(w.running) for w in listed)
    print(f"{workers} workers, {leases} live leases ({running} shown running)")
    print(f"refresh (register_worker): {refresh_ms:.2f} ms each")
    print(f"listing (list_workers):    {list_ms:.1f} ms each")


def main() -> int:
    """Parse the flags and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--refreshes", type=int, default=500)
    args = parser.parse_args()
    anyio.run(run, max(1, args.workers), max(0, args.leases), max(1, args.refreshes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
