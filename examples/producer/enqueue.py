"""Enqueue tasks on the review pipeline from a script (the async producer API), then wait.

    backlog-worker pipeline create -f examples/pipelines/review.toml --tracker sqlite:///./rail.db
    python examples/producer/enqueue.py --tracker sqlite:///./rail.db "Write the changelog" "Fix it"
    python examples/producer/enqueue.py --tracker http://127.0.0.1:7700 --token-file token \
        --wait 60 "Ship it"

Each title becomes one task of pipeline ``review`` (by name); ``--after ID`` makes them wait
for that task, ``--delay SECONDS`` keeps them unclaimable that long, ``--dedupe KEY`` answers
the existing task instead of a duplicate. With ``--wait`` it waits (up to that many seconds)
for each task and prints its outcome: a worker serving the review roles (examples/workers/)
finishes them; without one the outcome is ``pending``.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from tracker_client import connect


async def main() -> None:
    """Submit each title, print its id, then (``--wait``) each outcome."""
    parser = argparse.ArgumentParser(description="Enqueue review tasks and wait for them.")
    parser.add_argument("titles", nargs="+")
    parser.add_argument("--tracker", default="sqlite:///./rail.db")
    parser.add_argument("--token-file", type=Path)
    parser.add_argument("--pipeline", default="review")
    parser.add_argument("--after", action="append", default=[], metavar="TASK_ID")
    parser.add_argument("--delay", type=float)
    parser.add_argument("--dedupe", metavar="KEY")
    parser.add_argument("--wait", type=float, metavar="SECONDS")
    args = parser.parse_args()
    token = args.token_file.read_text().strip() if args.token_file else None
    async with connect(args.tracker, token=token) as rail:
        ids = [
            await rail.submit(
                args.pipeline,
                title,
                metadata={"source": "enqueue.py"},
                depends_on=args.after,
                delay=args.delay,
                dedupe_key=args.dedupe,
            )
            for title in args.titles
        ]
        for task_id in ids:
            print(task_id)
        if args.wait is not None:
            for task_id in ids:
                result = await rail.wait(task_id, timeout=args.wait)
                print(f"{task_id} {result.outcome} {result.task.stage}")


if __name__ == "__main__":
    asyncio.run(main())
