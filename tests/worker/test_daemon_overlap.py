"""A run's slot goes back when its executor returns: the next claim overlaps its final report.

Against a real embedded tracker whose final-report writes (``transition``, ``fail``) are held at
a gate the test opens: the only fault a real rail can't produce on demand here is "this report
is slow". It hides ``finish_many`` (each report is then its own write, so each waits at the
gate itself rather than behind the batch in flight).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext
from tracker_client.capabilities import Capabilities
from tracker_client.protocol import Tracker
from worker.daemon import Worker, WorkerState

from .conftest import add_tasks, role, start_worker, wait_until, worker_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

_REPORTS = {"transition", "fail"}


class GatedReports:
    """The tracker, with its final-report writes waiting until :attr:`gate` is set."""

    def __init__(self, inner: Tracker) -> None:
        self._inner = inner
        self.gate = anyio.Event()
        self.parked = 0  # reports waiting at the gate now

    async def capabilities(self) -> Capabilities:
        caps = await self._inner.capabilities()
        return dataclasses.replace(caps, extensions=caps.extensions - {"finish_many"})

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in _REPORTS:
            return attr

        async def gated(*args: Any, **kwargs: Any) -> Any:
            self.parked += 1
            try:
                await self.gate.wait()
            finally:
                self.parked -= 1
            return await attr(*args, **kwargs)

        return gated


async def _one_slot_worker(
    tracker: Tracker, pipeline_id: str, tasks: int
) -> tuple[GatedReports, list[str], Worker]:
    """``tasks`` new tasks, and a draining one-slot worker on the gated tracker whose executor
    records the ids of the tasks it runs (the list returned)."""
    await add_tasks(tracker, pipeline_id, tasks)
    gated = GatedReports(tracker)
    started: list[str] = []

    async def work(ctx: ExecutionContext) -> None:
        started.append(ctx.task.id)

    worker = Worker(
        gated,
        worker_config(concurrency=1, drain=True),
        [role("coder", work)],
    )
    return gated, started, worker


async def test_next_claim_overlaps_the_previous_report(tracker: Tracker, pipeline_id: str) -> None:
    gated, started, worker = await _one_slot_worker(tracker, pipeline_id, 2)
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        # One slot: the second task is claimed and run while the first's report is still out.
        await wait_until(lambda: len(started) == 2)
        assert gated.parked >= 1
        gated.gate.set()
    assert worker.state is WorkerState.STOPPED
    assert sorted(started) == sorted(t.id for t in (await tracker.list_tasks()).items)
    stats = (await tracker.queue_stats()).for_role("reviewer")
    assert stats is not None and stats.claimable_count == 2  # both reports landed


async def test_outstanding_reports_are_bounded_by_concurrency(
    tracker: Tracker, pipeline_id: str
) -> None:
    gated, started, worker = await _one_slot_worker(tracker, pipeline_id, 4)
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: gated.parked == 3)
        # The first two reports freed their slot (REPORTS_PER_SLOT); the third may not (two
        # are outstanding already): it keeps its slot, so the fourth task is not claimed until
        # a report lands.
        assert len(started) == 3
        assert len(worker.claimer.runs) == 3
        assert worker.claimer.executing == 1
        gated.gate.set()
    assert len(started) == 4
    stats = (await tracker.queue_stats()).for_role("reviewer")
    assert stats is not None and stats.claimable_count == 4


async def test_cancelling_the_runs_leaves_a_report_under_way_be(
    tracker: Tracker, pipeline_id: str
) -> None:
    """A run whose executor returned reports in its own scope made the report's (shielded):
    cancelling the runs then, as a stop past the grace does, does not drop its report."""
    gated, _started, worker = await _one_slot_worker(tracker, pipeline_id, 1)
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: gated.parked == 1)
        worker.claimer.cancel_runs()
        gated.gate.set()
    assert worker.stats.transitioned == 1 and worker.stats.lost == 0
    stats = (await tracker.queue_stats()).for_role("reviewer")
    assert stats is not None and stats.claimable_count == 1
