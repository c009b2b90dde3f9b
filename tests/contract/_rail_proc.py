"""A child process for the multi-process contract tests (run as ``python -m``).

``drain DB AGENT OUT``: open the rail, print ``ready``, wait for a line on stdin, then claim and
transition ``coder`` tasks until a claim finds no work; write one JSON record per claim
(``task``, ``lease``, ``run``, ``version``) to OUT and print ``drained N``.

``churn DB AGENT OUT``: like ``drain`` with 1.5 s leases, but abandons (never finishes) the
first attempt of every task whose title ends in ``!``, as a worker that hangs would; keeps going
until no task is left in ``todo`` (others' abandoned leases must expire and be reclaimed). Each
record also holds ``attempt``, ``started``, ``expires`` and ``abandoned``.

``fill URL PIPELINE``: open the rail at URL, print ``ready``, wait for a line on stdin, then
create tasks one at a time until ``BacklogFull``; print ``created N``.

``writes DB PIPELINE``: open the rail and write forever, printing after every committed write
what it did (``created ID``, ``claimed ID``, ``event ID``, ``done ID``, ``failed ID``), so the
parent can SIGKILL it in the middle of the stream and check what must have survived.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from tracker_client.errors import BacklogFull, LeaseLost
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, TaskCreate


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def drain(db: str, agent: str, out: str) -> None:
    """Claim and transition until there is no work; record every lease granted."""
    tracker = await open_tracker(f"sqlite:///{db}")
    records = []
    try:
        _say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        while (lease := await tracker.claim(agent, "coder", 60_000)) is not None:
            records.append(
                {
                    "task": lease.task.id,
                    "lease": lease.lease_id,
                    "run": lease.run.id,
                    "version": lease.task.task_version,
                }
            )
            await tracker.transition(
                lease,
                "complete",
                expected_stage=lease.task.stage,
                expected_task_version=lease.task.task_version,
            )
    finally:
        await tracker.aclose()
    Path(out).write_text(json.dumps(records))
    _say(f"drained {len(records)}")


async def churn(db: str, agent: str, out: str) -> None:
    """Drain with short leases, abandoning some first attempts; wait for their expiry."""
    tracker = await open_tracker(f"sqlite:///{db}")
    records = []
    try:
        _say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        while True:
            lease = await tracker.claim(agent, "coder", 1_500)
            if lease is None:
                if not (await tracker.list_tasks(stage="todo", limit=1)).items:
                    break
                await tracker.wait_for_work(0.05)
                continue
            abandon = lease.task.title.endswith("!") and lease.run.attempt == 1
            records.append(
                {
                    "task": lease.task.id,
                    "lease": lease.lease_id,
                    "run": lease.run.id,
                    "attempt": lease.run.attempt,
                    "started": lease.run.started_at_ms,
                    "expires": lease.expires_at_ms,
                    "abandoned": abandon,
                }
            )
            if not abandon:
                try:
                    await tracker.transition(lease, "complete")
                except LeaseLost:
                    records[-1]["lost"] = True
    finally:
        await tracker.aclose()
    Path(out).write_text(json.dumps(records))
    _say(f"churned {len(records)}")


async def fill(url: str, pipeline_id: str) -> None:
    """Create tasks until the role's backlog is full; report how many this process created."""
    tracker = await open_tracker(url)
    created = 0
    try:
        _say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        while True:
            try:
                await tracker.create_task(TaskCreate(pipeline_id=pipeline_id, title="fill"))
            except BacklogFull:
                break
            created += 1
    finally:
        await tracker.aclose()
    _say(f"created {created}")


async def writes(db: str, pipeline_id: str) -> None:
    """Write forever: create, claim, event, then transition (even) or fail (odd)."""
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        i = 0
        while True:
            # retried at once: the checker expects every failed task to be claimable again
            spec = TaskCreate(
                pipeline_id=pipeline_id, title=f"w{i}", retry_policy=RetryPolicy(retry_delay_ms=0)
            )
            tid = await tracker.create_task(spec)
            _say(f"created {tid}")
            lease = await tracker.claim("writer", "coder", 600_000)
            if lease is None:
                raise SystemExit("no work right after a create")
            _say(f"claimed {lease.task.id}")
            await tracker.add_event(lease, "progress", {"i": i, "pad": "x" * 200})
            _say(f"event {lease.task.id}")
            if i % 2 == 0:
                await tracker.transition(lease, "complete")
                _say(f"done {lease.task.id}")
            else:
                await tracker.fail(lease, f"failure {i}")
                _say(f"failed {lease.task.id}")
            i += 1
    finally:
        await tracker.aclose()


def main(argv: list[str]) -> None:
    """Dispatch on the mode argument."""
    mode, *args = argv
    if mode == "drain":
        db, agent, out = args
        anyio.run(drain, db, agent, out)
    elif mode == "churn":
        db, agent, out = args
        anyio.run(churn, db, agent, out)
    elif mode == "fill":
        url, pipeline_id = args
        anyio.run(fill, url, pipeline_id)
    elif mode == "writes":
        db, pipeline_id = args
        anyio.run(writes, db, pipeline_id)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
