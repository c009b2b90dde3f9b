"""The worker's batched final reports (:mod:`worker.lease.batch`) on a real embedded rail.

Reports arriving while one ``finish_many`` is in flight go together in the next; a lone report
goes at once; each report keeps its own outcome (a refused one raises to its own caller only),
its own key across retries, and its own deadline (a cancelled caller leaves the queue); a lost
batch answer is a retryable error for each of its callers. End to end, a worker's runs that end
together are reported in fewer calls than runs, and a failed run's error event rides with its
fail in the batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext, Failure, Transition
from tracker_client.capabilities import Capabilities
from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome
from tracker_client.errors import Conflict, TrackerUnavailable
from tracker_client.models import Lease
from tracker_client.protocol import Tracker
from worker.daemon import Worker
from worker.lease import LeaseSession
from worker.lease.batch import ReportBatcher, batcher_for
from worker.retry import TrackerCalls

from .conftest import add_tasks, role, start_worker, wait_until, worker_config
from .runkit import FAST_RETRY

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

DONE = {"trigger": "complete"}


class Gate:
    """The rail's ``finish_many``, recording each call; while ``held``, a call waits for
    :meth:`open` (so reports can be made to arrive during one in flight); ``outage``: the next
    that many calls fail as if their answer were lost."""

    def __init__(self, tracker: Tracker, *, held: bool = False, outage: int = 0) -> None:
        self._tracker = tracker
        self._open = anyio.Event()
        if not held:
            self._open.set()
        self.outage = outage
        self.calls: list[list[FinishItem]] = []
        self.in_flight = 0

    def open(self) -> None:
        self._open.set()

    async def __call__(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        self.calls.append(list(items))
        self.in_flight += 1
        try:
            await self._open.wait()
            if self.outage:
                self.outage -= 1
                raise TrackerUnavailable("finish_many: injected lost answer")
            outcomes: list[FinishManyOutcome] = await self._tracker.finish_many(items)  # type: ignore[attr-defined]
            return outcomes
        finally:
            self.in_flight -= 1


async def _leases(tracker: Tracker, pipeline_id: str, n: int) -> list[Lease]:
    await add_tasks(tracker, pipeline_id, n)
    leases = await tracker.claim_many("w1", "coder", 60_000, n=n)  # type: ignore[attr-defined]
    assert len(leases) == n
    return list(leases)


def _transition(lease: Lease, **over: Any) -> FinishItem:
    body = {"trigger": "complete", "expected_task_version": lease.task.task_version, **over}
    return FinishItem(lease=lease, transition=body)


async def test_reports_arriving_during_a_call_go_together_in_the_next(
    tracker: Tracker, pipeline_id: str
) -> None:
    leases = await _leases(tracker, pipeline_id, 6)
    gate = Gate(tracker, held=True)
    batcher = ReportBatcher(gate)
    results: dict[int, Any] = {}

    async def report(i: int) -> None:
        results[i] = await batcher.finish(_transition(leases[i]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(report, 0)
        await wait_until(lambda: gate.in_flight == 1)  # the lone first report went at once
        for i in range(1, 6):
            tg.start_soon(report, i)
        await wait_until(lambda: len(batcher._queue) == 5)
        gate.open()

    assert [len(call) for call in gate.calls] == [1, 5]
    assert (batcher.calls, batcher.items) == (2, 6)
    assert all(results[i].transition.new_stage == "review" for i in range(6))


async def test_a_refused_report_raises_to_its_own_caller_only(
    tracker: Tracker, pipeline_id: str
) -> None:
    leases = await _leases(tracker, pipeline_id, 3)
    gate = Gate(tracker, held=True)
    batcher = ReportBatcher(gate)
    outcomes: dict[int, Any] = {}

    async def report(i: int, item: FinishItem) -> None:
        try:
            outcomes[i] = await batcher.finish(item)
        except Conflict as exc:
            outcomes[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(report, 0, _transition(leases[0]))
        await wait_until(lambda: gate.in_flight == 1)
        tg.start_soon(report, 1, _transition(leases[1], expected_task_version=99))
        tg.start_soon(report, 2, _transition(leases[2]))
        await wait_until(lambda: len(batcher._queue) == 2)
        gate.open()

    assert isinstance(outcomes[1], Conflict)
    assert outcomes[0].transition.new_stage == outcomes[2].transition.new_stage == "review"
    assert (await tracker.get_task(leases[1].task.id)).stage == "todo"


async def test_a_lost_batch_answer_is_retried_by_each_session_with_its_key(
    tracker: Tracker, pipeline_id: str
) -> None:
    leases = await _leases(tracker, pipeline_id, 3)
    gate = Gate(tracker, outage=1)
    batcher = ReportBatcher(gate)
    calls = TrackerCalls(FAST_RETRY, keys=True)
    sessions = [
        LeaseSession(tracker, lease, calls=calls, ttl_s=30.0, reports=batcher) for lease in leases
    ]
    moved: list[str] = []

    async def report(s: LeaseSession) -> None:
        result = await s.transition(
            "complete",
            expected_stage="todo",
            expected_task_version=s.lease.task.task_version,
            instructions=None,
            usage=None,
            budget_s=10.0,
        )
        moved.append(result.new_stage)

    async with anyio.create_task_group() as tg:
        for s in sessions:
            tg.start_soon(report, s)

    assert moved == ["review"] * 3
    keys: dict[str, list[str | None]] = {}
    for call in gate.calls:
        for item in call:
            keys.setdefault(item.lease.run_id, []).append(item.idempotency_key)
    lost = [item.lease.run_id for item in gate.calls[0]]
    for run_id, sent in keys.items():
        assert all(sent) and len(set(sent)) == 1  # a retry resends the same key
        assert len(sent) == (2 if run_id in lost else 1)
    assert len({sent[0] for sent in keys.values()}) == 3  # each report its own key


async def test_a_cancelled_report_leaves_the_queue_unsent(
    tracker: Tracker, pipeline_id: str
) -> None:
    leases = await _leases(tracker, pipeline_id, 3)
    gate = Gate(tracker, held=True)
    batcher = ReportBatcher(gate)

    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.finish, _transition(leases[0]))
        await wait_until(lambda: gate.in_flight == 1)
        scope = anyio.CancelScope()

        async def cancelled() -> None:
            with scope:
                await batcher.finish(_transition(leases[1]))

        tg.start_soon(cancelled)
        await wait_until(lambda: len(batcher._queue) == 1)
        tg.start_soon(batcher.finish, _transition(leases[2]))
        await wait_until(lambda: len(batcher._queue) == 2)
        scope.cancel()
        await wait_until(lambda: len(batcher._queue) == 1)
        gate.open()

    sent = [item.lease.run_id for call in gate.calls for item in call]
    assert sent == [leases[0].run.id, leases[2].run.id]
    assert (await tracker.get_task(leases[1].task.id)).stage == "todo"


async def test_a_cancelled_leader_leaves_its_batch_retryable(
    tracker: Tracker, pipeline_id: str
) -> None:
    leases = await _leases(tracker, pipeline_id, 2)
    gate = Gate(tracker, held=True)
    batcher = ReportBatcher(gate)
    heard: list[BaseException] = []

    async def follower() -> None:
        try:
            await batcher.finish(_transition(leases[1]))
        except TrackerUnavailable as exc:
            heard.append(exc)

    async with anyio.create_task_group() as tg:
        leader = anyio.CancelScope()

        async def lead() -> None:
            with leader:
                await batcher.finish(_transition(leases[0]))

        tg.start_soon(lead)
        await wait_until(lambda: gate.in_flight == 1)
        tg.start_soon(follower)
        await wait_until(lambda: len(batcher._queue) == 1)
        leader.cancel()  # the leader's call is abandoned; the follower leads the next batch
        await wait_until(lambda: gate.in_flight == 1 and len(gate.calls) == 2)
        gate.open()

    assert heard == []  # the follower was not in the abandoned batch: its report went through
    assert (await tracker.get_task(leases[1].task.id)).stage == "review"


async def test_a_leader_cancelled_before_its_pass_sends_nothing(
    tracker: Tracker, pipeline_id: str
) -> None:
    # A report whose scope is cancelled by the time its batch would go (its lease gone, its
    # deadline passed) writes nothing; a report after it still leads and goes through.
    leases = await _leases(tracker, pipeline_id, 2)
    gate = Gate(tracker)
    batcher = ReportBatcher(gate)

    with anyio.CancelScope() as scope:
        scope.cancel()  # cancelled before the report: its scheduling pass meets it
        await batcher.finish(_transition(leases[0]))
    assert scope.cancelled_caught
    assert gate.calls == [] and batcher.calls == 0  # nothing taken, nothing sent
    assert batcher._queue == [] and not batcher._sending

    result = await batcher.finish(_transition(leases[1]))
    assert result.transition is not None and result.transition.new_stage == "review"
    assert [[item.lease.run_id for item in call] for call in gate.calls] == [[leases[1].run.id]]
    assert (await tracker.get_task(leases[0].task.id)).stage == "todo"


async def test_a_report_arriving_in_a_cancelled_leaders_pass_leads_the_next_batch(
    tracker: Tracker, pipeline_id: str
) -> None:
    leases = await _leases(tracker, pipeline_id, 2)
    gate = Gate(tracker)
    batcher = ReportBatcher(gate)
    results: list[Any] = []

    async def lead() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()  # its pass meets the cancel: it takes and sends nothing
            await batcher.finish(_transition(leases[0]))

    async def follow() -> None:
        results.append(await batcher.finish(_transition(leases[1])))

    async with anyio.create_task_group() as tg:
        tg.start_soon(lead)
        tg.start_soon(follow)  # queued during the leader's pass: woken to lead in its place

    assert [[item.lease.run_id for item in call] for call in gate.calls] == [[leases[1].run.id]]
    assert results[0].transition.new_stage == "review"
    assert (await tracker.get_task(leases[0].task.id)).stage == "todo"


class Counting:
    """The real tracker, counting ``finish_many`` calls and items; ``batch=False`` hides it."""

    def __init__(self, inner: Tracker, *, batch: bool = True) -> None:
        self._inner = inner
        self._batch = batch
        self.calls = 0
        self.items: list[FinishItem] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        self.calls += 1
        self.items.extend(items)
        outcomes: list[FinishManyOutcome] = await self._inner.finish_many(items)  # type: ignore[attr-defined]
        return outcomes

    async def capabilities(self) -> Capabilities:
        caps = await self._inner.capabilities()
        if self._batch:
            return caps
        return dataclasses.replace(caps, extensions=caps.extensions - {"finish_many"})


async def test_a_worker_reports_runs_ending_together_in_fewer_calls(
    tracker: Tracker, pipeline_id: str
) -> None:
    await add_tasks(tracker, pipeline_id, 40)
    counting = Counting(tracker)
    release = anyio.Event()

    async def work(ctx: ExecutionContext) -> None:
        await release.wait()  # ten runs end at once

    worker = Worker(counting, worker_config(concurrency=10, drain=True), [role("coder", work)])  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: worker.stats.in_flight == 10)
        release.set()

    assert len(counting.items) == 40 and len({i.lease.run_id for i in counting.items}) == 40
    assert counting.calls < 40  # ten runs released together are reported in fewer calls


async def test_a_failed_run_sends_its_error_event_with_its_fail_in_the_batch(
    tracker: Tracker, pipeline_id: str
) -> None:
    [tid] = await add_tasks(tracker, pipeline_id, 1)
    counting = Counting(tracker)

    async def broken(ctx: ExecutionContext) -> Failure:
        return Failure(reason="broken", message="it broke", retryable=False)

    worker = Worker(counting, worker_config(drain=True), [role("coder", broken)])  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)

    [item] = counting.items
    assert [e["kind"] for e in item.events] == ["error"] and item.fail is not None
    detail = await tracker.get_task(tid)
    assert detail.dead_letter_reason == "permanent_failure"
    events = await tracker.list_task_events(tid, kind="error")
    assert [e.data["reason"] for e in events.items] == ["broken"]


async def test_no_batcher_where_the_rail_lacks_finish_many(tracker: Tracker) -> None:
    caps = await tracker.capabilities()
    assert batcher_for(tracker, caps.extensions) is not None
    assert batcher_for(tracker, caps.extensions - {"finish_many"}) is None
    with pytest.raises(ValueError, match="max_items: 1 to 100, got 0"):
        ReportBatcher(Gate(tracker), max_items=0)


class EventCounting(Counting):
    """:class:`Counting`, also counting ``add_event`` calls (events written on their own)."""

    def __init__(self, inner: Tracker) -> None:
        super().__init__(inner)
        self.alone: list[str] = []

    async def add_event(self, lease: Any, kind: str, data: Any, **kw: Any) -> int:
        self.alone.append(kind)
        written: int = await self._inner.add_event(lease, kind, data, **kw)
        return written


async def _run_one(tracker: Tracker, pipeline_id: str, work: Any) -> tuple[str, EventCounting]:
    [tid] = await add_tasks(tracker, pipeline_id, 1)
    counting = EventCounting(tracker)
    config = worker_config(drain=True, report_flush_s=60.0)  # nothing flushed before the end
    worker = Worker(counting, config, [role("coder", work)])  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    return tid, counting


async def test_a_runs_last_events_ride_with_its_report(tracker: Tracker, pipeline_id: str) -> None:
    async def work(ctx: ExecutionContext) -> None:
        await ctx.report("step", {"n": 1})
        await ctx.report("result", {"answer": 42})

    tid, counting = await _run_one(tracker, pipeline_id, work)

    [item] = counting.items
    assert [e["kind"] for e in item.events] == ["step", "result"] and item.transition
    assert counting.alone == []  # no request of their own
    events = (await tracker.list_task_events(tid, limit=100)).items
    assert [e.kind for e in events if e.kind in ("step", "result", "transition")] == [
        "step",
        "result",
        "transition",
    ]


async def test_an_oversized_last_event_becomes_a_marker_and_the_report_goes_through(
    tracker: Tracker, pipeline_id: str
) -> None:
    [lease] = await _leases(tracker, pipeline_id, 1)
    counting = EventCounting(tracker)
    batcher = ReportBatcher(counting.finish_many)
    calls = TrackerCalls(FAST_RETRY, keys=False)
    s = LeaseSession(counting, lease, calls=calls, ttl_s=30.0, reports=batcher)  # type: ignore[arg-type]

    moved = await s.transition(
        "complete",
        expected_stage="todo",
        expected_task_version=1,
        instructions=None,
        usage=None,
        budget_s=10.0,
        events=[("step", {"n": 1}), ("huge", {"blob": "x" * 2_000_000})],
    )

    assert moved.new_stage == "review"
    # The item was refused whole (nothing of it written); the events then went alone (the
    # huge one refused again, so written as a marker) and the report without them.
    assert [len(i.events) for i in counting.items] == [2, 0]
    assert counting.alone == ["step", "huge", "huge"]
    events = (await tracker.list_events(lease.run.id, limit=100)).items
    assert [(e.kind, e.data.get("dropped")) for e in events if e.kind != "transition"] == [
        ("step", None),
        ("huge", True),
    ]


async def test_a_refused_report_keeps_the_runs_last_events(
    tracker: Tracker, pipeline_id: str
) -> None:
    async def work(ctx: ExecutionContext) -> Any:
        await ctx.report("step", {"n": 1})
        return Transition("no-such-trigger")

    tid, _ = await _run_one(tracker, pipeline_id, work)

    assert [e.data for e in (await tracker.list_task_events(tid, kind="step")).items] == [{"n": 1}]
    [error] = (await tracker.list_task_events(tid, kind="error")).items
    assert error.data["reason"] == "invalid_trigger"
