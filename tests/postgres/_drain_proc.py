"""A worker-like child process for the multi-host test (run as ``python -m``).

``drain URL AGENT``: open the PostgreSQL rail, print ``ready``, wait for a line on stdin, then
claim ``coder`` tasks with 2 s leases and finish each (printing ``done TASK`` after every
committed transition) until no task is left in ``todo``: it waits (``wait_for_work``) for the
leases of a process that died to lapse, and claims their tasks again. Prints ``drained N``.

``drain_many URL AGENT``: the same as a worker sends it: ``claim_many`` of 5 under a fresh key
and the batch's final reports as one ``finish_many`` (so the rail claims ahead with them,
``tracker_client/ahead.py``).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Awaitable, Callable

import anyio

from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.errors import LeaseLost
from tracker_client.factory import open_tracker
from tracker_client.protocol import Tracker


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _drain(url: str, take: Callable[[Tracker], Awaitable[list[str] | None]]) -> None:
    """Say ``ready``, wait for ``go``, then ``take`` (the ids of the tasks it finished, or
    None when it claimed nothing) until every task is out of ``todo``."""
    tracker = await open_tracker(url)
    done = 0
    try:
        _say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        while True:
            finished = await take(tracker)
            if finished is None:
                if await tracker.call("count_tasks", stage="todo") == 0:
                    break
                await tracker.wait_for_work(0.5)
                continue
            for task_id in finished:
                done += 1
                _say(f"done {task_id}")
    finally:
        await tracker.aclose()
    _say(f"drained {done}")


async def drain(url: str, agent: str) -> None:
    """Claim and finish one task at a time until every task is out of ``todo``."""

    async def one(tracker: Tracker) -> list[str] | None:
        lease = await tracker.claim(agent, "coder", 2_000)
        if lease is None:
            return None
        try:
            await tracker.transition(lease, "complete")
        except LeaseLost:
            return []  # it took too long here: the task went back to the pool
        return [lease.task.id]

    await _drain(url, one)


async def drain_many(url: str, agent: str) -> None:
    """Claim batches and finish each batch in one call until every task is out of ``todo``."""

    async def batch(tracker: Tracker) -> list[str] | None:
        key = str(uuid.uuid4())
        leases = await tracker.claim_many(agent, "coder", 2_000, 5, idempotency_key=key)
        if not leases:
            return None
        items = [
            FinishItem(lease=x, transition={"trigger": "complete"}, idempotency_key=x.run.id)
            for x in leases
        ]
        outcomes = await tracker.finish_many(items)
        # an outcome other than a result: the lease was lost, the task went back
        return [
            lease.task.id
            for lease, outcome in zip(leases, outcomes, strict=True)
            if isinstance(outcome, FinishResult)
        ]

    await _drain(url, batch)


if __name__ == "__main__":
    mode, url, agent = sys.argv[1:]
    modes = {"drain": drain, "drain_many": drain_many}
    if mode not in modes:
        raise SystemExit(f"unknown mode {mode!r}")
    anyio.run(modes[mode], url, agent)
