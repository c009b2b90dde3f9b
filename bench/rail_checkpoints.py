"""What checkpoints cost the embedded rail: a heartbeat with and without one, the checkpoint
operation (1 KiB and 60 KiB values), and a claim that hands a previous checkpoint back.

    python -m bench.rail_checkpoints [--ops 2000] [--claims 250]

A fresh SQLite file in a temporary directory; each figure is the mean of ``--ops`` calls (after
50 warm-up calls) in one process. The worker's side (``ctx.checkpoint``) is ``bench.checkpoint``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import Lease, RetryPolicy, TaskCreate

DEFINITION = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
SMALL = {"step": 3, "notes": "x" * 1000}
BIG = {"blob": "y" * 60_000}


async def _mean_us(ops: int, call: Callable[[], Awaitable[object]]) -> float:
    for _ in range(50):
        await call()
    start = time.perf_counter()
    for _ in range(ops):
        await call()
    return (time.perf_counter() - start) / ops * 1e6


async def _claims(tracker: EmbeddedTracker, n: int, checkpointed: bool) -> float:
    """Mean claim time over ``n`` tasks whose earlier run wrote a checkpoint (or did not)."""
    leases: list[Lease] = []
    for _ in range(n):
        lease = await tracker.claim("a", "coder", 60_000)
        assert lease is not None
        if checkpointed:
            await tracker.checkpoint(lease, SMALL)
        leases.append(lease)
    for lease in leases:
        await tracker.fail(lease, "again")
    start = time.perf_counter()
    again = [await tracker.claim("a", "coder", 60_000) for _ in range(n)]
    took = (time.perf_counter() - start) / n * 1e6
    for lease in again:
        assert lease is not None
        await tracker.transition(lease, "complete")
    return took


async def run(ops: int, claims: int) -> None:
    """Print each figure (microseconds per call)."""
    with tempfile.TemporaryDirectory() as tmp:
        tracker = await EmbeddedTracker.open(str(Path(tmp) / "rail.db"))
        try:
            pid = await tracker.create_pipeline("p", DEFINITION)
            policy = RetryPolicy(max_attempts=9, retry_delay_ms=0)
            await tracker.create_tasks(
                [
                    TaskCreate(pipeline_id=pid, title=f"t{i}", retry_policy=policy)
                    for i in range(2 * claims + 1)
                ]
            )
            lease = await tracker.claim("a", "coder", 60_000)
            assert lease is not None
            rows = [
                ("heartbeat", lambda: tracker.heartbeat(lease)),
                (
                    "heartbeat + 1 KiB checkpoint",
                    lambda: tracker.heartbeat(lease, checkpoint=SMALL),
                ),
                ("checkpoint 1 KiB", lambda: tracker.checkpoint(lease, SMALL)),
                ("checkpoint 60 KiB", lambda: tracker.checkpoint(lease, BIG)),
            ]
            for label, call in rows:
                print(f"{label:42s} {await _mean_us(ops, call):8.1f} us")
            await tracker.transition(lease, "complete")
            for label, checkpointed in (("no earlier checkpoint", False), ("previous read", True)):
                took = await _claims(tracker, claims, checkpointed)
                print(f"{'claim, ' + label:42s} {took:8.1f} us")
        finally:
            await tracker.aclose()


def main() -> None:
    """``python -m bench.rail_checkpoints``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--claims", type=int, default=250)
    args = parser.parse_args()
    anyio.run(run, args.ops, args.claims)


if __name__ == "__main__":
    main()
