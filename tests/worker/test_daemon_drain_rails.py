"""A draining worker waits for retries and for runs elsewhere, on every rail kind.

Real trackers (an embedded SQLite file; the same behind the served HTTP app, in process; the fake
NullTickets server, which has no queue figures for it), real :class:`~worker.daemon.Worker`s with
in-process executors. Before, a drain exited with "queue drained" as soon as one claim found
nothing: while another worker's run was in flight, or a retry waited out its delay.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from plugins.api import ExecutionContext, Failure
from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tests.remote.fixtures import served_asgi
from tests.worker.conftest import role, start_worker, wait_until, worker_config
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings
from tracker_client.protocol import Tracker
from worker.daemon import Worker, WorkerState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TOKEN = "drain-test-token"


@asynccontextmanager
async def rail(kind: str, tmp_path: Path) -> AsyncIterator[Tracker]:
    db = tmp_path / "rail.db"
    if kind == "embedded":
        tracker = await open_tracker(f"sqlite:///{db}")
        try:
            yield tracker
        finally:
            await tracker.aclose()
    elif kind == "served":
        async with served_asgi(db) as remote:
            yield remote
    else:
        fake = FakeNullTickets(api_token=TOKEN)
        remote = RemoteTracker(
            "http://127.0.0.1:7700",
            api_token=TOKEN,
            retry=RetrySettings(attempts=1),
            transport=fake.transport(),
        )
        try:
            yield remote
        finally:
            await remote.aclose()


@pytest.mark.parametrize("kind", ["embedded", "served", "nulltickets"])
async def test_a_drain_retries_its_own_failed_task(kind: str, tmp_path: Path) -> None:
    calls = 0

    async def flaky(ctx: ExecutionContext) -> Failure | None:
        nonlocal calls
        calls += 1
        return Failure("flaky", "first attempt fails") if calls == 1 else None

    async with rail(kind, tmp_path) as tracker:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        # no policy: the rail's default (NullTickets: the client's 5 attempts, 1 s apart)
        task_id = await tracker.create_task(TaskCreate(pipeline_id=pid, title="flaky"))
        worker = Worker(tracker, worker_config(drain=True, idle_max_s=30), [role("coder", flaky)])
        with anyio.fail_after(30):
            await worker.run()
        task = await tracker.get_task(task_id)
    assert (task.stage, task.dead_letter_reason) == ("done", None)
    assert calls == 2
    assert (worker.stats.failed, worker.stats.transitioned) == (1, 1)


@pytest.mark.parametrize("kind", ["embedded", "served"])
async def test_a_drain_waits_for_another_workers_run_and_takes_over_its_retry(
    kind: str, tmp_path: Path
) -> None:
    a_started, a_may_fail = anyio.Event(), anyio.Event()

    async def a_work(ctx: ExecutionContext) -> Failure:
        a_started.set()
        await a_may_fail.wait()
        return Failure("flaky", "A's attempt fails")

    async def b_work(ctx: ExecutionContext) -> None:
        return None

    async with rail(kind, tmp_path) as tracker:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        task_id = await tracker.create_task(TaskCreate(pipeline_id=pid, title="shared"))
        a = Worker(tracker, worker_config(agent_id="a"), [role("coder", a_work)])
        b = Worker(
            tracker, worker_config(agent_id="b", drain=True, idle_max_s=30), [role("coder", b_work)]
        )
        b_done = anyio.Event()

        async def run_b() -> None:
            await b.run()
            b_done.set()

        with anyio.fail_after(45):
            async with anyio.create_task_group() as tg:
                await start_worker(tg, a)
                await a_started.wait()
                tg.start_soon(run_b)
                # B found nothing to claim, twice, and waits on: A's run is in flight
                await wait_until(lambda: b.claimer.pacing.idle_round >= 2, 20)
                assert not b_done.is_set() and b.state is WorkerState.RUNNING
                a_may_fail.set()
                await wait_until(lambda: a.stats.failed == 1, 20)
                a.stop()  # A is gone before the retry is due: B takes it
                await b_done.wait()
        task = await tracker.get_task(task_id)
        runs = await tracker.list_runs(task_id)
    assert (task.stage, task.dead_letter_reason) == ("done", None)
    assert [(r.agent_id, r.status) for r in runs] == [("a", "failed"), ("b", "completed")]
