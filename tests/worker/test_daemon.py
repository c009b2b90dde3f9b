"""The worker daemon against a real embedded tracker: slots, fairness, leases, reports, shutdown."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext, Failure, Transition
from tracker_client.capabilities import Capabilities
from tracker_client.errors import TrackerUnavailable
from tracker_client.models import RetryPolicy
from tracker_client.protocol import Tracker
from worker.daemon import Worker, WorkerState

from .conftest import add_tasks, role, start_worker, wait_until, worker_config

pytestmark = pytest.mark.anyio


async def stage_counts(tracker: Tracker, pipeline_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    cursor = None
    while True:
        page = await tracker.list_tasks(pipeline_id=pipeline_id, limit=1000, cursor=cursor)
        for t in page.items:
            counts[t.stage] = counts.get(t.stage, 0) + 1
        if page.next_cursor is None:
            return counts
        cursor = page.next_cursor


async def test_concurrency_is_honoured_exactly(tracker: Tracker, pipeline_id: str) -> None:
    await add_tasks(tracker, pipeline_id, 12)
    running = 0
    peak = 0
    release = anyio.Event()

    async def work(ctx: ExecutionContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    worker = Worker(tracker, worker_config(concurrency=3, drain=True), [role("coder", work)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: running == 3)
        # Slots before claims: with 3 busy slots, exactly 3 tasks hold a lease.
        stats = await tracker.queue_stats()
        coder = stats.for_role("coder")
        assert coder is not None and coder.running_count == 3
        release.set()
    assert peak == 3
    assert worker.state is WorkerState.STOPPED
    assert (await stage_counts(tracker, pipeline_id)) == {"review": 12}


async def test_a_roles_max_concurrency_caps_its_runs_with_slots_free(
    tracker: Tracker, pipeline_id: str
) -> None:
    await add_tasks(tracker, pipeline_id, 3)
    running = 0
    peak = 0
    release = anyio.Event()

    async def work(ctx: ExecutionContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    worker = Worker(
        tracker,
        worker_config(concurrency=3, drain=True),
        [role("coder", work, max_concurrency=1)],
    )
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: running == 1)
        # Two slots stay free, yet rounds of claims pass without a second run of the role.
        await wait_until(lambda: worker.claimer.pacing.idle_round >= 3)
        stats = await tracker.queue_stats()
        coder = stats.for_role("coder")
        assert coder is not None and coder.running_count == 1
        assert running == 1 and worker.claimer.executing == 1
        release.set()  # each run then ends at once: its place goes back, the next one starts
    assert peak == 1
    assert worker.stats.transitioned == 3
    assert (await stage_counts(tracker, pipeline_id)) == {"review": 3}


async def test_roles_rotate_fairly(tracker: Tracker, pipeline_id: str) -> None:
    # 6 coder tasks and 6 tasks already in review: with one slot, claims must alternate.
    await add_tasks(tracker, pipeline_id, 6)
    reviewed = await add_tasks(tracker, pipeline_id, 6, priority=-1)
    for _ in reviewed:
        lease = await tracker.claim("seed", "coder", 5000)
        assert lease is not None
        await tracker.transition(lease, "complete")
    order: list[str] = []

    async def record(ctx: ExecutionContext) -> Any:
        order.append(ctx.task.stage)
        return Transition("approve" if ctx.task.stage == "review" else "complete")

    worker = Worker(
        tracker,
        worker_config(concurrency=1, max_tasks=8),
        [role("coder", record), role("reviewer", record)],
    )
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    assert order[:8] == ["todo", "review"] * 4


async def test_lost_lease_cancels_executor_within_a_heartbeat(
    tracker: Tracker, pipeline_id: str
) -> None:
    [task_id] = await add_tasks(tracker, pipeline_id, 1)
    started = anyio.Event()
    cancelled = anyio.Event()

    async def forever(ctx: ExecutionContext) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    ttl = 0.6
    worker = Worker(tracker, worker_config(lease_ttl_s=ttl), [role("coder", forever)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await started.wait()
        await tracker.cancel(task_id)
        t0 = anyio.current_time()
        with anyio.fail_after(ttl):  # one heartbeat interval is ttl/3; allow slack
            await cancelled.wait()
        assert anyio.current_time() - t0 <= ttl
        await wait_until(lambda: worker.stats.lost == 1)
        worker.stop()
    detail = await tracker.get_task(task_id)
    assert detail.dead_letter_reason == "cancelled"
    assert detail.latest_run is not None and detail.latest_run.status == "cancelled"
    events = await tracker.list_events(detail.latest_run.id)
    assert [e.kind for e in events.items if e.kind in ("error", "transition")] == []


async def test_timeout_fails_the_run_with_reason_timeout(
    tracker: Tracker, pipeline_id: str
) -> None:
    [task_id] = await add_tasks(
        tracker, pipeline_id, 1, metadata={"timeout_s": 0.2}, retry_policy={"max_attempts": 1}
    )

    async def slow(ctx: ExecutionContext) -> None:
        await anyio.sleep(30)

    worker = Worker(tracker, worker_config(drain=True), [role("coder", slow)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    detail = await tracker.get_task(task_id)
    assert detail.latest_run is not None and detail.latest_run.status == "failed"
    assert detail.latest_run.error is not None and detail.latest_run.error.startswith("timeout")
    assert detail.dead_letter_reason == "max_attempts_exceeded"


async def test_executor_crash_reports_error_event_then_fails(
    tracker: Tracker, pipeline_id: str
) -> None:
    [task_id] = await add_tasks(tracker, pipeline_id, 1, retry_policy={"max_attempts": 1})

    async def boom(ctx: ExecutionContext) -> None:
        raise RuntimeError("kaboom")

    worker = Worker(tracker, worker_config(drain=True), [role("coder", boom)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    detail = await tracker.get_task(task_id)
    assert detail.latest_run is not None
    events = (await tracker.list_events(detail.latest_run.id)).items
    error = next(e for e in events if e.kind == "error")
    assert error.data["type"] == "RuntimeError"
    assert error.data["message"] == "kaboom"
    assert "Traceback" in error.data["traceback"]
    assert detail.latest_run.status == "failed"
    assert worker.stats.failed == 1


async def test_bad_trigger_fails_with_allowed_triggers(tracker: Tracker, pipeline_id: str) -> None:
    [task_id] = await add_tasks(tracker, pipeline_id, 1)

    async def wrong(ctx: ExecutionContext) -> Transition:
        return Transition("approve")  # not allowed from todo

    worker = Worker(tracker, worker_config(drain=True), [role("coder", wrong)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    detail = await tracker.get_task(task_id)
    assert detail.latest_run is not None and detail.latest_run.status == "failed"
    assert "allowed triggers: complete" in (detail.latest_run.error or "")
    # Not retryable: a configuration bug must not loop.
    assert detail.dead_letter_reason == "permanent_failure"


async def test_retryable_failure_goes_back_to_the_queue(tracker: Tracker, pipeline_id: str) -> None:
    # retried at once: a drain ends when nothing is claimable, a delayed retry included
    [task_id] = await add_tasks(tracker, pipeline_id, 1, retry_policy=RetryPolicy(retry_delay_ms=0))
    attempts: list[int] = []

    async def flaky(ctx: ExecutionContext) -> Any:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            return Failure(reason="flaky", message="try again")
        return Transition()

    worker = Worker(tracker, worker_config(drain=True), [role("coder", flaky)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    assert attempts == [1, 2, 3]
    assert (await tracker.get_task(task_id)).stage == "review"


class FlakyTracker:
    """The real tracker behind a switch that makes chosen operations unavailable."""

    def __init__(self, inner: Tracker, failing: set[str]) -> None:
        self._inner = inner
        self.failing = failing
        self.failures = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.failing:
            return attr

        async def broken(*args: Any, **kwargs: Any) -> Any:
            if name in self.failing:
                self.failures += 1
                raise TrackerUnavailable(f"{name}: injected outage")
            return await attr(*args, **kwargs)

        return broken


async def test_tracker_outage_is_retried_and_recovers(tracker: Tracker, pipeline_id: str) -> None:
    await add_tasks(tracker, pipeline_id, 4)
    # The reports go out batched (the rail has finish_many): its outage is the reports'.
    flaky = FlakyTracker(tracker, {"ping", "claim", "transition", "finish_many"})
    done = 0

    async def work(ctx: ExecutionContext) -> None:
        nonlocal done
        done += 1

    worker = Worker(flaky, worker_config(drain=True), [role("coder", work)])  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        # Down at start-up: the worker keeps retrying instead of dying.
        await wait_until(lambda: flaky.failures >= 3)
        assert worker.state is WorkerState.STARTING
        flaky.failing = {"transition", "finish_many"}
        await wait_until(lambda: done >= 1)
        await wait_until(lambda: flaky.failures >= 6)
        flaky.failing = set()  # back up: the pending transitions go through
    assert (await stage_counts(tracker, pipeline_id)) == {"review": 4}


async def test_stop_drains_in_flight_work_then_reports_shutdown(
    tracker: Tracker, pipeline_id: str
) -> None:
    ids = await add_tasks(tracker, pipeline_id, 2)
    started = 0
    finish = anyio.Event()

    async def work(ctx: ExecutionContext) -> Any:
        nonlocal started
        started += 1
        if ctx.task.id == ids[0]:
            await finish.wait()  # finishes within the grace
            return Transition()
        await anyio.sleep_forever()  # must be cancelled after the grace

    worker = Worker(
        tracker, worker_config(concurrency=2, shutdown_grace_s=0.5), [role("coder", work)]
    )
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: started == 2)
        worker.stop()
        worker.stop()  # idempotent... and a second stop skips the grace
        finish.set()
    first, second = await tracker.get_task(ids[0]), await tracker.get_task(ids[1])
    assert second.latest_run is not None and second.latest_run.status == "released"
    assert "worker_shutdown" in (second.latest_run.error or "")
    assert first.latest_run is not None
    assert worker.state is WorkerState.STOPPED


async def test_grace_lets_in_flight_work_finish(tracker: Tracker, pipeline_id: str) -> None:
    [task_id] = await add_tasks(tracker, pipeline_id, 1)
    started = anyio.Event()
    finish = anyio.Event()

    async def work(ctx: ExecutionContext) -> None:
        started.set()
        await finish.wait()
        assert ctx.shutting_down

    worker = Worker(tracker, worker_config(shutdown_grace_s=10), [role("coder", work)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await started.wait()
        worker.stop()
        await wait_until(lambda: worker.state is WorkerState.DRAINING)
        finish.set()
    assert (await tracker.get_task(task_id)).stage == "review"


async def test_reports_are_batched(tracker: Tracker, pipeline_id: str) -> None:
    [task_id] = await add_tasks(tracker, pipeline_id, 1)

    async def chatty(ctx: ExecutionContext) -> None:
        for i in range(500):
            await ctx.report("progress", {"line": i})

    worker = Worker(tracker, worker_config(drain=True), [role("coder", chatty)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    detail = await tracker.get_task(task_id)
    assert detail.latest_run is not None
    events = (await tracker.list_events(detail.latest_run.id, limit=1000)).items
    progress = [e for e in events if e.kind == "progress"]
    assert 1 <= len(progress) < 50
    lines = [item["line"] for e in progress for item in e.data.get("batch", [e.data])]
    assert lines == list(range(500))


async def test_idle_worker_picks_up_new_work_quickly(tracker: Tracker, pipeline_id: str) -> None:
    picked = anyio.Event()

    async def work(ctx: ExecutionContext) -> None:
        picked.set()

    worker = Worker(tracker, worker_config(idle_min_s=0.05, idle_max_s=5.0), [role("coder", work)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await anyio.wait_all_tasks_blocked()
        await add_tasks(tracker, pipeline_id, 1)
        # The idle back-off ceiling is 5 s; the tracker's wake-up must beat it.
        with anyio.fail_after(2):
            await picked.wait()
        worker.stop()


async def test_instructions_of_previous_transition_reach_the_executor(
    tracker: Tracker, pipeline_id: str
) -> None:
    [task_id] = await add_tasks(tracker, pipeline_id, 1)
    seen: list[str | None] = []

    async def work(ctx: ExecutionContext) -> Any:
        seen.append(ctx.instructions)
        if ctx.task.stage == "review":
            return Transition("reject" if len(seen) == 2 else "approve")
        return Transition("complete")

    worker = Worker(
        tracker,
        worker_config(drain=True, concurrency=1),
        [role("coder", work), role("reviewer", work)],
    )
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    assert seen == [None, None, "try again", None]
    assert (await tracker.get_task(task_id)).stage == "done"


async def test_instructions_come_from_the_latest_transition_across_pages(
    tracker: Tracker, pipeline_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three transitions and a history of progress events, read one transition per page: the
    # instructions must come from the latest transition, wherever its page is.
    monkeypatch.setattr("worker.run.task.TRANSITIONS_PAGE", 1)
    [task_id] = await add_tasks(tracker, pipeline_id, 1)
    moves = [
        ("coder", "complete", "first"),
        ("reviewer", "reject", "redo"),
        ("coder", "complete", "latest"),
    ]
    for n, (role_name, trigger, text) in enumerate(moves):
        lease = await tracker.claim("prep", role_name, 60_000)
        assert lease is not None
        for i in range(3):
            await tracker.add_event(lease, "progress", {"move": n, "i": i})
        await tracker.transition(lease, trigger, instructions=text)
    seen: list[str | None] = []

    async def review(ctx: ExecutionContext) -> Any:
        seen.append(ctx.instructions)
        return Transition("approve")

    worker = Worker(tracker, worker_config(drain=True), [role("reviewer", review)])
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    assert seen == ["latest"]
    assert (await tracker.get_task(task_id)).stage == "done"


async def test_stop_ends_a_start_up_wait_for_a_down_tracker(
    tracker: Tracker, pipeline_id: str
) -> None:
    flaky = FlakyTracker(tracker, {"ping"})
    worker = Worker(flaky, worker_config(), [role("coder", lambda ctx: anyio.sleep(0))])  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_until(lambda: flaky.failures >= 2)
        worker.stop()
    assert worker.state is WorkerState.STOPPED


class UsedTracker:
    """The real tracker, with the name of every operation the worker looked up recorded."""

    def __init__(self, inner: Tracker) -> None:
        self._inner = inner
        self.used: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.used.append(name)
        return getattr(self._inner, name)


async def test_start_up_waits_on_a_ping_not_on_a_census_of_the_rail(
    tracker: Tracker, pipeline_id: str
) -> None:
    # health counts every task the rail keeps (its cost grows with the tasks kept) and builds
    # its answer's model: start-up needs only to know the tracker answers (issue 31).
    await add_tasks(tracker, pipeline_id, 2)
    used = UsedTracker(tracker)
    worker = Worker(used, worker_config(drain=True), [role("coder", lambda ctx: anyio.sleep(0))])  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    assert (await stage_counts(tracker, pipeline_id)) == {"review": 2}
    assert "ping" in used.used
    assert "health" not in used.used


class CountingTracker:
    """The real tracker, with claims (and ``claim_many`` calls) counted and their overlap
    measured; ``batching=False`` hides ``claim_many`` from its capabilities."""

    def __init__(self, inner: Tracker, *, batching: bool = False) -> None:
        self._inner = inner
        self._batching = batching
        self.claims = 0
        self.in_flight = 0
        self.peak = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def capabilities(self) -> Capabilities:
        caps = await self._inner.capabilities()
        if self._batching:
            return caps
        return dataclasses.replace(caps, extensions=caps.extensions - {"claim_many"})

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        return await self._counted(self._inner.claim(*args, **kwargs))

    async def claim_many(self, *args: Any, **kwargs: Any) -> Any:
        return await self._counted(self._inner.claim_many(*args, **kwargs))

    async def parked_claim(self, *args: Any, **kwargs: Any) -> Any:
        # A served rail's idle probe waits at the tracker: a claim too.
        return await self._counted(self._inner.parked_claim(*args, **kwargs))

    async def _counted(self, claim: Awaitable[Any]) -> Any:
        self.claims += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await claim
        finally:
            self.in_flight -= 1


async def test_claims_overlap_while_work_flows_but_not_when_idle(
    tracker: Tracker, pipeline_id: str
) -> None:
    await add_tasks(tracker, pipeline_id, 200)
    counting = CountingTracker(tracker)

    async def work(ctx: ExecutionContext) -> None:
        await anyio.sleep(0)

    worker = Worker(
        counting,  # type: ignore[arg-type]
        worker_config(concurrency=8, idle_min_s=0.05, idle_max_s=0.05),
        [role("coder", work)],
    )
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: worker.stats.transitioned == 200)
        assert 2 <= counting.peak <= 8  # overlapping, one per slot at most
        # Idle: each back-off round makes a single claim, not one per free slot. An idle
        # worker's parked claims follow each other without a gap (a quiet round ends with no
        # last look), so the reset waits for no run and at most that one claim in flight.
        await wait_until(lambda: worker.stats.in_flight == 0 and counting.in_flight <= 1)
        counting.peak = counting.in_flight
        # ... and the back-off keeps growing while idle. Wait for claims made after the reset:
        # on a busy machine the back-off may already be past round 4 when the reset happens.
        before = counting.claims
        await wait_until(
            lambda: counting.claims >= before + 3 and worker.claimer.pacing.idle_round >= 4
        )
        assert counting.peak == 1
        worker.stop()
    assert (await stage_counts(tracker, pipeline_id)) == {"review": 200}


async def test_free_slots_claim_together_with_claim_many(
    tracker: Tracker, pipeline_id: str
) -> None:
    await add_tasks(tracker, pipeline_id, 200)
    counting = CountingTracker(tracker, batching=True)

    async def work(ctx: ExecutionContext) -> None:
        await anyio.sleep(0)

    worker = Worker(
        counting,  # type: ignore[arg-type]
        worker_config(concurrency=8, idle_min_s=0.05, idle_max_s=0.05),
        [role("coder", work)],
    )
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: worker.stats.transitioned == 200)
        # Fewer claim requests than tasks: the slots free at once shared one claim_many.
        assert counting.claims < 200
        # No run and at most the idle worker's one parked claim in flight (see above).
        await wait_until(lambda: worker.stats.in_flight == 0 and counting.in_flight <= 1)
        counting.peak = counting.in_flight
        before = counting.claims  # claims made after the reset (the back-off may be past 4)
        await wait_until(
            lambda: counting.claims >= before + 3 and worker.claimer.pacing.idle_round >= 4
        )
        assert counting.peak == 1  # idle: one claim per back-off round
        worker.stop()
    assert (await stage_counts(tracker, pipeline_id)) == {"review": 200}
    assert worker.stats.claimed == 200


class KeyRecorder:
    """The real tracker, recording the idempotency key of every write; ``lossy`` says whether
    it declares that answers can be lost (as a tracker across a network does)."""

    def __init__(self, inner: Tracker, *, lossy: bool, fail_first_transition: bool = False) -> None:
        self._inner = inner
        self._lossy = lossy
        self.keys: list[tuple[str, str | None]] = []
        self._fail_transition = fail_first_transition

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in {"claim", "transition", "fail", "add_event"}:
            return attr

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            self.keys.append((name, kwargs.get("idempotency_key")))
            if name == "transition" and self._fail_transition:
                self._fail_transition = False
                raise TrackerUnavailable("transition: injected lost answer")
            return await attr(*args, **kwargs)

        return recorded

    async def capabilities(self) -> Capabilities:
        """The real tracker's, declaring whether answers can be lost as ``lossy`` says, and
        without ``finish_many`` (each report its own call; the batched reports' keys are
        tests/worker/test_report_batch.py's)."""
        caps = await self._inner.capabilities()
        return dataclasses.replace(
            caps,
            answers_can_be_lost=self._lossy,
            extensions=caps.extensions - {"finish_many"},
        )


@pytest.mark.parametrize("lossy", [True, False])
async def test_idempotency_keys_only_where_answers_can_be_lost(
    tracker: Tracker, pipeline_id: str, lossy: bool
) -> None:
    await add_tasks(tracker, pipeline_id, 3)
    recorder = KeyRecorder(tracker, lossy=lossy, fail_first_transition=True)

    async def work(ctx: ExecutionContext) -> None:
        return None

    worker = Worker(recorder, worker_config(drain=True), [role("coder", work)])  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
    assert (await stage_counts(tracker, pipeline_id)) == {"review": 3}
    transitions = [key for op, key in recorder.keys if op == "transition"]
    assert len(transitions) == 4  # one retried after the injected outage
    if not lossy:  # the embedded tracker never loses an answer: no key, no record to write
        assert all(key is None for _, key in recorder.keys)
        return
    claims = [key for op, key in recorder.keys if op == "claim"]
    assert all(claims) and len(set(claims)) == len(claims)  # a fresh key per claim
    assert all(transitions)
    # the retry of the failed transition reused its key; the three writes had their own
    assert sorted(transitions.count(k) for k in set(transitions)) == [1, 1, 2]
    assert transitions.count(transitions[0]) == 2  # the first one was retried


def test_worker_runs_on_trio_too(tmp_path: Any) -> None:
    """The daemon is written against anyio only: a whole drain works on the trio backend."""
    pytest.importorskip("trio", minversion="0.26")
    from tracker_client.factory import open_tracker

    from .conftest import PIPELINE

    async def main() -> dict[str, int]:
        tracker = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
        try:
            pid = await tracker.create_pipeline("flow", PIPELINE)
            await add_tasks(tracker, pid, 5)

            async def work(ctx: ExecutionContext) -> None:
                await ctx.report("progress", {"task": ctx.task.id}, flush=True)

            worker = Worker(tracker, worker_config(drain=True), [role("coder", work)])
            with anyio.fail_after(30):
                await worker.run()
            return await stage_counts(tracker, pid)
        finally:
            await tracker.aclose()

    assert anyio.run(main, backend="trio") == {"review": 5}
