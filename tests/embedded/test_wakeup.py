"""The idle wake-up: several waiters in one process all see another process's write."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tracker_client.embedded import EmbeddedTracker

pytestmark = pytest.mark.anyio

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "go"}],
}


async def test_every_waiter_wakes_on_another_connections_write(tmp_path: Path) -> None:
    path = str(tmp_path / "rail.db")
    waiting = await EmbeddedTracker.open(path, poll_interval_s=0.02)
    writer = await EmbeddedTracker.open(path)
    woken = 0
    try:
        async with anyio.create_task_group() as tg:

            async def wait() -> None:
                nonlocal woken
                await waiting.wait_for_work(30)
                woken += 1

            for _ in range(3):
                tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            # The writer is another connection (as another process would be): no in-process
            # event, only the file changes. Keep writing until the waiters have their baseline.
            with anyio.fail_after(10):
                while woken < 3:
                    await writer.create_pipeline(f"p{woken}-{anyio.current_time()}", PIPELINE)
                    await anyio.sleep(0.05)
    finally:
        await waiting.aclose()
        await writer.aclose()
    assert woken == 3
