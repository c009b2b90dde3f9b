"""LISTEN/NOTIFY wake-ups between two instances of one rail (as two hosts): new work, a cancel
and a finished task wake the other instance's waiters well before the 5 s safety tick."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import anyio
import pytest

from tests.contract.support import claim, make_pipeline, new_task
from tests.postgres.server import PgServer, fresh_schema_url
from tracker_client.factory import open_tracker
from tracker_client.postgres.tracker import SAFETY_TICK_S

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: Generous for a loaded CI machine, and still well under the safety tick.
WOKEN_WITHIN_S = 2.5


async def test_another_instance_wakes_idle_waiters_at_once(pg_server: PgServer) -> None:
    assert WOKEN_WITHIN_S < SAFETY_TICK_S
    url = fresh_schema_url(f"wake-{uuid.uuid4()}")
    idle, writer = await open_tracker(url), await open_tracker(url)
    try:
        pid = await make_pipeline(writer)
        await idle.wait_for_work(0.01)  # the listener is up from here on
        latencies: list[float] = []

        async def woken(action: Callable[[], Awaitable[object]]) -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(idle.wait_for_work, 30.0)
                await anyio.sleep(0.2)  # the waiter is asleep
                start = anyio.current_time()
                await action()
            latencies.append(anyio.current_time() - start)

        await woken(lambda: writer.create_task(new_task(pid, "new work")))
        lease = await claim(idle)
        second = await writer.create_task(new_task(pid, "to cancel"))
        await woken(lambda: writer.cancel(second))
        assert all(s < WOKEN_WITHIN_S for s in latencies), latencies

        with anyio.fail_after(WOKEN_WITHIN_S + 1):
            async with anyio.create_task_group() as tg:

                async def finish() -> None:
                    await anyio.sleep(0.2)
                    await writer.transition(lease, "complete")

                tg.start_soon(finish)
                result = await idle.wait(lease.task.id, timeout_s=30)
        assert result.finished and result.outcome == "done"
    finally:
        await idle.aclose()
        await writer.aclose()
