"""The claim loop's tasks are parked between jobs and reused (worker/daemon/runners.py)."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from plugins.api import ExecutionContext
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig
from worker.daemon import Worker
from worker.daemon.runners import Runners
from worker.keeper import LeaseKeeper
from worker.run import TaskRun

from .conftest import FnExecutor, add_tasks, role, start_worker, wait_until, worker_config
from .runkit import claim_one, run_task, settings
from .test_daemon import stage_counts

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_jobs_go_to_parked_tasks() -> None:
    done: list[int] = []
    gates = [anyio.Event() for _ in range(3)]

    async def job(scope: anyio.CancelScope, i: int) -> None:
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

    async def job(scope: anyio.CancelScope) -> None:
        ran.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            runners = Runners(tg)
            runners.close()
            runners.start(job)
    assert ran.is_set() and runners.parked == 0


async def test_a_cancelled_group_ends_its_parked_tasks() -> None:
    async def job(scope: anyio.CancelScope) -> None:
        pass

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            runners = Runners(tg)
            runners.start(job)
            await wait_until(lambda: runners.parked == 1)
            tg.cancel_scope.cancel()
    assert runners.parked == 0


async def test_a_job_that_leaves_its_scope_cancelled_ends_its_task() -> None:
    """Every job of a task gets the task's one scope, as the first got it; a job that cancels
    it (a run cut short) ends the task, and the next job goes to a new one."""
    scopes: list[anyio.CancelScope] = []
    seen: list[tuple[float, bool, bool]] = []
    done: list[anyio.CancelScope] = []

    async def job(scope: anyio.CancelScope, cancel: bool) -> None:
        scopes.append(scope)
        seen.append((scope.deadline, scope.shield, scope.cancel_called))
        if cancel:
            scope.cancel()
            with pytest.raises(anyio.get_cancelled_exc_class()):
                await anyio.sleep_forever()  # the task's scope: the job itself is cancelled
        done.append(scope)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            runners = Runners(tg)
            runners.start(job, False)
            await wait_until(lambda: runners.parked == 1)
            runners.start(job, False)  # the parked task, the same scope
            await wait_until(lambda: runners.parked == 1)
            runners.start(job, True)  # the same task: it ends after this job
            await wait_until(lambda: len(done) == 3)  # (its task went on in the same step)
            assert runners.parked == 0
            runners.start(job, False)  # none parked: a new task and scope
            await wait_until(lambda: runners.parked == 1)
            runners.close()
    assert scopes[0] is scopes[1] is scopes[2] and scopes[3] is not scopes[0]
    assert runners.spawned == 2
    assert seen == [(math.inf, False, False)] * 4


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


async def test_a_run_cut_short_ends_its_task_and_the_next_run_gets_a_working_deadline(
    tracker: Tracker, pipeline_id: str
) -> None:
    """A run whose lease the tracker took is cancelled through its task's scope; that task
    ends, and the next run, in a new task, gets the lease's deadline and is cancelled when
    its own lease goes."""
    ids = await add_tasks(tracker, pipeline_id, 2)
    ttl = 0.6
    deadlines: list[tuple[float, float]] = []
    cancelled: list[str] = []

    async def forever(ctx: ExecutionContext) -> None:
        await anyio.sleep(ttl / 2)  # the first heartbeat (a third of the TTL in) armed it
        deadlines.append((anyio.current_time(), anyio.current_effective_deadline()))
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(ctx.task.id)

    worker = Worker(
        tracker, worker_config(concurrency=1, lease_ttl_s=ttl), [role("coder", forever)]
    )
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await start_worker(tg, worker)
            for n in (1, 2):
                await wait_until(lambda n=n: len(deadlines) == n)
                now, deadline = deadlines[-1]
                assert now < deadline < now + ttl  # the lease's end less the margin
                runners = worker.claimer.runners
                assert runners is not None and runners.spawned == n  # a new task per run
                running = [run.lease.task.id for run in worker.claimer.runs]
                await tracker.cancel(running[0])
                await wait_until(lambda n=n: worker.stats.lost == n)
            worker.stop()
    assert sorted(cancelled) == sorted(ids)


async def test_a_run_hands_its_tasks_scope_back_as_it_came(
    tracker: Tracker, tmp_path: Path
) -> None:
    """A run that outlived its first heartbeat (its scope got the lease's deadline) and
    reported in the scope (shielded) hands it back with neither, for the task's next job."""
    ttl = 1.5  # a heartbeat at 0.5 s, the deadline (less the margin) at ~1.1 s
    lease = await claim_one(tracker, ttl_s=ttl)

    async def past_a_heartbeat(ctx: ExecutionContext) -> None:
        await anyio.sleep(ttl / 2)
        assert anyio.current_effective_deadline() < anyio.current_time() + ttl

    keeper = LeaseKeeper()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(keeper.run)
            run = TaskRun(
                tracker=tracker,
                lease=lease,
                role=RoleConfig(name="coder", executor="test"),
                executor=FnExecutor(past_a_heartbeat),
                settings=settings(tmp_path, ttl_s=ttl),
                shutdown=anyio.Event(),
                keeper=keeper,
            )
            with anyio.CancelScope() as scope:
                result = await run.execute(scope)
                assert (scope.deadline, scope.shield, scope.cancel_called) == (
                    math.inf,
                    False,
                    False,
                )
            tg.cancel_scope.cancel()
    assert result.status == "transitioned"


async def test_a_stop_before_the_executor_starts_cancels_it_as_it_starts(
    tracker: Tracker, tmp_path: Path
) -> None:
    """A run stopped before its executor started (the scope not the run's yet) is cancelled
    as it starts, and hands its task back."""
    lease = await claim_one(tracker)

    async def forever(ctx: ExecutionContext) -> None:
        await anyio.sleep_forever()

    with anyio.fail_after(10):
        result = await run_task(
            tracker, lease, FnExecutor(forever), settings(tmp_path), on_run=TaskRun.cancel
        )
    assert result.status == "released"


async def test_an_executor_raising_its_cancellation_in_a_group_leaves_the_worker_running(
    tracker: Tracker, pipeline_id: str
) -> None:
    """An executor that, cancelled by its lease's loss, raises the cancellation in an exception
    group beside an error of its own: the run's cancellation is taken out of the group (as
    leaving a scope of the run's own took it), the error is the run's crash, and the worker
    goes on to the next task instead of its group of runs going down."""
    ids = await add_tasks(tracker, pipeline_id, 2)
    started: list[str] = []

    async def mixed(ctx: ExecutionContext) -> None:
        started.append(ctx.task.id)
        if len(started) > 1:
            return
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class() as exc:
            raise BaseExceptionGroup("mixed", [exc, ValueError("the executor's own")]) from None

    worker = Worker(tracker, worker_config(concurrency=1, lease_ttl_s=0.6), [role("coder", mixed)])
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await start_worker(tg, worker)
            await wait_until(lambda: len(started) == 1)
            await tracker.cancel(started[0])
            await wait_until(lambda: len(started) == 2)  # the next task ran
            worker.stop()
    assert sorted(started) == sorted(ids)
