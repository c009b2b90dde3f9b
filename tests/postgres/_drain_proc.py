"""A worker-like child process for the multi-host test (run as ``python -m``).

``drain URL AGENT``: open the PostgreSQL rail, print ``ready``, wait for a line on stdin, then
claim ``coder`` tasks with 2 s leases and finish each (printing ``done TASK`` after every
committed transition) until no task is left in ``todo``: it waits (``wait_for_work``) for the
leases of a process that died to lapse, and claims their tasks again. Prints ``drained N``.

``drain_many URL AGENT``: the same as a worker sends it: ``claim_many`` of 5 under a fresh key
and the batch's final reports as one ``finish_many`` (so the rail claims ahead with them,
``tracker_client/postgres/ahead.py``).
"""

from __future__ import annotations

import sys
import uuid

import anyio

from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.errors import LeaseLost
from tracker_client.factory import open_tracker


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def drain(url: str, agent: str) -> None:
    """Claim and finish until every task is out of ``todo``."""
    tracker = await open_tracker(url)
    done = 0
    try:
        _say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        while True:
            lease = await tracker.claim(agent, "coder", 2_000)
            if lease is None:
                if await tracker.call("count_tasks", stage="todo") == 0:
                    break
                await tracker.wait_for_work(0.5)
                continue
            try:
                await tracker.transition(lease, "complete")
            except LeaseLost:
                continue  # it took too long here: the task went back to the pool
            done += 1
            _say(f"done {lease.task.id}")
    finally:
        await tracker.aclose()
    _say(f"drained {done}")


async def drain_many(url: str, agent: str) -> None:
    """Claim batches and finish each batch in one call until every task is out of ``todo``."""
    tracker = await open_tracker(url)
    done = 0
    try:
        _say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        while True:
            key = str(uuid.uuid4())
            leases = await tracker.claim_many(agent, "coder", 2_000, 5, idempotency_key=key)
            if not leases:
                if await tracker.call("count_tasks", stage="todo") == 0:
                    break
                await tracker.wait_for_work(0.5)
                continue
            items = [
                FinishItem(lease=x, transition={"trigger": "complete"}, idempotency_key=x.run.id)
                for x in leases
            ]
            outcomes = await tracker.finish_many(items)
            for lease, outcome in zip(leases, outcomes, strict=True):
                if isinstance(outcome, FinishResult):  # else lost: the task went back
                    done += 1
                    _say(f"done {lease.task.id}")
    finally:
        await tracker.aclose()
    _say(f"drained {done}")


if __name__ == "__main__":
    mode, url, agent = sys.argv[1:]
    modes = {"drain": drain, "drain_many": drain_many}
    if mode not in modes:
        raise SystemExit(f"unknown mode {mode!r}")
    anyio.run(modes[mode], url, agent)
