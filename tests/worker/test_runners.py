"""The claim loop's tasks are parked between jobs and reused (worker/daemon/runners.py)."""

from __future__ import annotations

import anyio
import pytest

from tracker_client.protocol import Tracker
from worker.daemon import Worker
from worker.daemon.runners import Runners

from .conftest import add_tasks, role, wait_until, worker_config
from .test_daemon import stage_counts

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_jobs_go_to_parked_tasks() -> None:
    done: list[int] = []
    gates = [anyio.Event() for _ in range(3)]

    async def job(i: int) -> None:
        await gates[i % 3].wait()
        done.append(i)

    async with anyio.create_task_group() as tg:
        runners = Runners(tg)
        for i in range(3):
            runners.start(job, i)
        assert runners.spawned == 3  # none parked yet: one task each
        for gate in gates:
            gate.set()
        await wait_until(lambda: runners.parked == 3)
        for i in range(3, 9):  # the gates are open: each job returns at once
            runners.start(job, i)
            await wait_until(lambda: runners.parked == 3)
        assert runners.spawned == 3  # the parked tasks ran them all
        runners.close()  # the parked tasks end: the group exits
    assert sorted(done) == list(range(9))


async def test_a_job_after_close_runs_in_a_task_that_then_ends() -> None:
    ran = anyio.Event()

    async def job() -> None:
        ran.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            runners = Runners(tg)
            runners.close()
            runners.start(job)
    assert ran.is_set() and runners.parked == 0


async def test_a_cancelled_group_ends_its_parked_tasks() -> None:
    async def job() -> None:
        pass

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            runners = Runners(tg)
            runners.start(job)
            await wait_until(lambda: runners.parked == 1)
            tg.cancel_scope.cancel()
    assert runners.parked == 0


async def test_a_drain_spawns_a_task_per_slot_not_per_run(
    tracker: Tracker, pipeline_id: str
) -> None:
    """60 runs on 3 slots: the tasks a whole drain spawns stay near what runs at once."""
    await add_tasks(tracker, pipeline_id, 60)

    async def work(ctx: object) -> None:
        await anyio.sleep(0)

    worker = Worker(tracker, worker_config(concurrency=3, drain=True), [role("coder", work)])
    with anyio.fail_after(20):
        await worker.run()
    assert await stage_counts(tracker, pipeline_id) == {"review": 60}
    assert worker.stats.transitioned == 60
    # claims (3 at most) plus runs executing (3) and reporting (3): never one per run
    runners = worker.claimer.runners
    assert runners is not None and runners.parked == 0  # closed at the loop's end
    assert 1 <= runners.spawned <= 9
