"""An idle worker in-process on a real rail file: one claim per idle round whatever its
concurrency, and a cancel made in the same process reaches the running executor at once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext
from tests.worker.conftest import PIPELINE, add_tasks, role, start_worker, wait_until, worker_config
from tracker_client.factory import open_tracker
from tracker_client.protocol import Tracker
from worker.daemon import Worker

pytestmark = pytest.mark.anyio


async def test_an_idle_worker_makes_one_claim_per_round(tracker: Tracker, pipeline_id: str) -> None:
    claims = 0
    real_claim = tracker.claim

    async def counting_claim(*args: Any, **kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        return await real_claim(*args, **kwargs)

    tracker.claim = counting_claim  # type: ignore[method-assign]
    config = worker_config(concurrency=4, idle_min_s=0.02, idle_max_s=0.02)
    worker = Worker(tracker, config, [role("coder", lambda ctx: anyio.sleep(0))])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        pacing = worker.claimer.pacing
        await wait_until(lambda: pacing.idle_round >= 20)
        worker.stop()
    # One probe per round (the first round may overlap one more): before, a round sent two.
    assert claims <= pacing.idle_round + 2, (claims, pacing.idle_round)


async def test_a_cancel_in_the_same_process_reaches_the_executor_at_once(
    tmp_path: Path,
) -> None:
    tracker = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        pipeline_id = await tracker.create_pipeline("flow", PIPELINE)
        [task_id] = await add_tasks(tracker, pipeline_id, 1)
        started = anyio.Event()
        ended: list[float] = []

        async def long(ctx: ExecutionContext) -> None:
            started.set()
            try:
                await anyio.sleep(60)
            finally:
                ended.append(time.monotonic())

        # TTL 30 s: the next regular heartbeat would be 10 s away.
        worker = Worker(tracker, worker_config(lease_ttl_s=30.0), [role("coder", long)])
        async with anyio.create_task_group() as tg:
            await start_worker(tg, worker)
            with anyio.fail_after(10):
                await started.wait()
            cancelled = time.monotonic()
            await tracker.cancel(task_id)
            await wait_until(lambda: ended, timeout=10)
            worker.stop()
        latency = ended[0] - cancelled
        print(f"same-process cancel reached the executor in {latency:.3f}s")
        assert latency < 2.0  # at once in fact; the bound leaves room for a loaded machine
        assert worker.stats.lost == 1
    finally:
        await tracker.aclose()


async def test_embedded_wake_ups_come_from_work_and_lapsed_leases_only(
    tracker: Tracker, pipeline_id: str
) -> None:
    """An idle worker's wait (``wait_for_work``) ends for a write that may make work, and when
    the earliest lease lapses; heartbeats, claims and an idle maintenance pass do not end it."""
    await add_tasks(tracker, pipeline_id, 1)
    lease = await tracker.claim("w1", "coder", 30_000)
    assert lease is not None

    async def quiet_writes() -> None:
        await tracker.heartbeat(lease)
        assert await tracker.claim("w1", "coder", 30_000) is None
        await tracker.maintenance()

    async with anyio.create_task_group() as tg:
        started = anyio.current_time()
        tg.start_soon(quiet_writes)
        await tracker.wait_for_work(0.5)
        slept = anyio.current_time() - started
    assert slept >= 0.45, f"woken after {slept:.3f}s by a write that made no work"

    async with anyio.create_task_group() as tg:
        started = anyio.current_time()
        tg.start_soon(add_tasks, tracker, pipeline_id, 1)
        await tracker.wait_for_work(5)
        assert anyio.current_time() - started < 2.0  # woken by the new task

    short = await tracker.claim("w2", "coder", 300)  # the new task, on a 0.3 s lease
    assert short is not None
    started = anyio.current_time()
    await tracker.wait_for_work(5)
    lapsed_after = anyio.current_time() - started
    assert 0.2 <= lapsed_after < 2.0, lapsed_after  # at the lapse, not at the timeout
    assert await tracker.claim("w3", "coder", 30_000) is not None  # and it is claimable
