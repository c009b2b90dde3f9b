"""A failed run's report: the ``error`` event and the fail in one ``finish`` where the rail has
it, and the old two writes (``add_event``, then ``fail``) where it has not.

Real Worker, real embedded rail; the wrapper only counts the writes and, for the second case,
hides ``finish`` from the capabilities (as a rail without the extension declares).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext, Failure
from tracker_client.capabilities import Capabilities
from tracker_client.protocol import Tracker
from worker.daemon import Worker

from .conftest import add_tasks, role, start_worker, wait_until, worker_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class WriteCounter:
    """The real tracker, counting ``add_event``/``fail``/``finish``; ``finish=False`` hides it."""

    def __init__(self, inner: Tracker, *, finish: bool) -> None:
        self._inner = inner
        self._finish = finish
        self.writes: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in {"add_event", "fail", "finish"}:
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.writes[name] += 1
            return await attr(*args, **kwargs)

        return counted

    async def capabilities(self) -> Capabilities:
        """The real tracker's without ``finish_many`` (reports not batched: the batched
        failure is tests/worker/test_report_batch.py's), and without ``finish`` unless asked."""
        caps = await self._inner.capabilities()
        hidden = {"finish_many"} if self._finish else {"finish", "finish_many"}
        return dataclasses.replace(caps, extensions=caps.extensions - hidden)


async def _fail_one(tracker: Tracker, pipeline_id: str, *, finish: bool) -> WriteCounter:
    [tid] = await add_tasks(tracker, pipeline_id, 1)
    counting = WriteCounter(tracker, finish=finish)

    async def broken(ctx: ExecutionContext) -> Failure:
        return Failure(reason="broken", message="it broke", retryable=False)

    worker = Worker(
        counting,  # type: ignore[arg-type]
        worker_config(concurrency=1, idle_min_s=0.05, idle_max_s=0.05),
        [role("coder", broken)],
    )
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: worker.stats.claimed == 1 and worker.stats.in_flight == 0)
        worker.stop()
    detail = await tracker.get_task(tid)
    assert detail.dead_letter_reason == "permanent_failure"
    events = await tracker.list_task_events(tid, kind="error")
    assert [e.data["reason"] for e in events.items] == ["broken"]
    return counting


async def test_a_failure_is_one_finish_where_the_rail_has_it(
    tracker: Tracker, pipeline_id: str
) -> None:
    counting = await _fail_one(tracker, pipeline_id, finish=True)
    assert counting.writes == Counter({"finish": 1})


async def test_a_failure_is_an_event_then_a_fail_without_finish(
    tracker: Tracker, pipeline_id: str
) -> None:
    counting = await _fail_one(tracker, pipeline_id, finish=False)
    assert counting.writes == Counter({"add_event": 1, "fail": 1})
