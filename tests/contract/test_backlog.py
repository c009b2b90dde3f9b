"""Backlog behaviours: bounded depth, bulk all-or-nothing, deadlines, crash loops, maintenance."""

from __future__ import annotations

import pytest

from tests.contract.support import (
    BACKLOG_OPS,
    CLOCK,
    EXTENSIONS,
    OPTIONS,
    RUN_DETAILS,
    FakeClock,
    OpenTracker,
    all_tasks,
    claim,
    make_pipeline,
    new_task,
    review_pipeline,
    simple_pipeline,
    task_events,
)
from tracker_client.errors import BacklogFull, NotFound, ValidationFailed
from tracker_client.models import DEAD_LETTER_NEVER_MS, RetryPolicy
from tracker_client.protocol import Tracker
from tracker_client.sweeps import SweepCounts

pytestmark = pytest.mark.anyio


# -- bounded depth ------------------------------------------------------------------------------
@pytest.mark.requires(OPTIONS)
async def test_backlog_full_names_role_depth_and_cap(open_tracker: OpenTracker) -> None:
    tracker = await open_tracker(max_backlog_depth=3)
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(3)])
    with pytest.raises(BacklogFull) as err:
        await tracker.create_task(new_task(pid, "one too many"))
    assert (err.value.role, err.value.depth, err.value.cap) == ("coder", 3, 3)
    assert str(err.value) == "backlog of role 'coder' is full: 3 waiting, cap 3"
    assert len(await all_tasks(tracker)) == 3
    # a running task is not waiting: claiming frees a place
    await claim(tracker)
    await tracker.create_task(new_task(pid, "fits now"))
    with pytest.raises(BacklogFull):
        await tracker.create_task(new_task(pid, "full again"))


@pytest.mark.requires(OPTIONS)
async def test_depth_counts_waiting_tasks_of_the_role_only(open_tracker: OpenTracker) -> None:
    tracker = await open_tracker(max_backlog_depth=2)
    pid = await make_pipeline(tracker, review_pipeline())
    fatal = RetryPolicy(max_attempts=0)
    await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b", retry_policy=fatal)])
    # a: moves on to review (another role's stage); b: dead-lettered in place
    await tracker.transition(await claim(tracker), "complete")
    await tracker.fail(await claim(tracker), "fatal")
    await tracker.create_tasks([new_task(pid, "c"), new_task(pid, "d")])
    with pytest.raises(BacklogFull) as err:
        await tracker.create_task(new_task(pid, "e"))
    assert (err.value.depth, err.value.cap) == (2, 2)


@pytest.mark.requires(OPTIONS)
async def test_retry_delayed_tasks_count_as_waiting(open_tracker: OpenTracker) -> None:
    tracker = await open_tracker(max_backlog_depth=1)
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(retry_delay_ms=60_000)
    await tracker.create_task(new_task(pid, retry_policy=policy))
    await tracker.fail(await claim(tracker), "later")
    with pytest.raises(BacklogFull):
        await tracker.create_task(new_task(pid))


@pytest.mark.requires(OPTIONS)
async def test_per_role_caps(open_tracker: OpenTracker) -> None:
    tracker = await open_tracker(max_backlog_depth=5, role_backlog_depth={"reviewer": 1})
    coders = await make_pipeline(tracker)
    reviewers = await make_pipeline(tracker, simple_pipeline("reviewer"))
    await tracker.create_task(new_task(reviewers))
    with pytest.raises(BacklogFull) as err:
        await tracker.create_task(new_task(reviewers))
    assert (err.value.role, err.value.cap) == ("reviewer", 1)
    assert "reviewer" in str(err.value)
    await tracker.create_tasks([new_task(coders, f"c{i}") for i in range(5)])


@pytest.mark.requires(OPTIONS)
async def test_zero_cap_is_unlimited(open_tracker: OpenTracker) -> None:
    tracker = await open_tracker(max_backlog_depth=0)
    pid = await make_pipeline(tracker)
    assert len(await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(300)])) == 300


@pytest.mark.requires(OPTIONS)
async def test_bulk_create_is_all_or_nothing_at_the_cap(open_tracker: OpenTracker) -> None:
    tracker = await open_tracker(max_backlog_depth=5)
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(3)])
    with pytest.raises(BacklogFull) as err:
        await tracker.create_tasks([new_task(pid, f"b{i}") for i in range(3)])
    assert (err.value.depth, err.value.cap) == (3, 5)
    assert len(await all_tasks(tracker)) == 3
    assert len(await tracker.create_tasks([new_task(pid, "x"), new_task(pid, "y")])) == 2


@pytest.mark.requires(OPTIONS)
async def test_a_refusal_names_the_exact_depth_not_the_rows_the_check_counted(
    open_tracker: OpenTracker,
) -> None:
    # The check counts at most cap - n + 1 waiting tasks (3 here) to decide; the refusal
    # still names all 4 waiting.
    tracker = await open_tracker(max_backlog_depth=5)
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(4)])
    with pytest.raises(BacklogFull) as err:
        await tracker.create_tasks([new_task(pid, f"b{i}") for i in range(3)])
    assert (err.value.role, err.value.depth, err.value.cap) == ("coder", 4, 5)
    assert str(err.value) == "backlog of role 'coder' is full: 4 waiting, cap 5"
    assert len(await all_tasks(tracker)) == 4
    assert len(await tracker.create_tasks([new_task(pid, "fits")])) == 1


@pytest.mark.requires(OPTIONS)
async def test_bulk_across_roles_is_refused_whole(open_tracker: OpenTracker) -> None:
    tracker = await open_tracker(role_backlog_depth={"reviewer": 1})
    coders = await make_pipeline(tracker)
    reviewers = await make_pipeline(tracker, simple_pipeline("reviewer"))
    batch = [new_task(coders, "c"), new_task(reviewers, "r1"), new_task(reviewers, "r2")]
    with pytest.raises(BacklogFull) as err:
        await tracker.create_tasks(batch)
    assert (err.value.role, err.value.depth, err.value.cap) == ("reviewer", 0, 1)
    assert await all_tasks(tracker) == []


async def test_bulk_create_with_one_bad_item_writes_nothing(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    batch = [
        new_task(pid, "good"),
        new_task("00000000-0000-4000-8000-000000000000", "bad pipeline"),
    ]
    with pytest.raises(NotFound) as err:
        await tracker.create_tasks(batch)
    assert err.value.code == "pipeline_not_found"
    batch = [new_task(pid, "good"), new_task(pid, "x" * 5000)]
    with pytest.raises(ValidationFailed):
        await tracker.create_tasks(batch)
    assert await all_tasks(tracker) == []


async def test_bulk_ids_come_in_input_order(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    ids = await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(20)])
    assert [(await tracker.get_task(tid)).title for tid in ids] == [f"t{i}" for i in range(20)]


async def test_empty_bulk_is_refused(tracker: Tracker) -> None:
    with pytest.raises(ValidationFailed) as err:
        await tracker.create_tasks([])
    assert err.value.code == "invalid_request"


# -- deadlines ----------------------------------------------------------------------------------
@pytest.mark.requires(CLOCK, EXTENSIONS)
async def test_waiting_task_past_its_deadline_is_expired(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, expires_at_ms=clock() + 1_000))
    assert (await tracker.get_task(tid)).expires_at_ms == clock() + 1_000
    clock.advance(1_001)
    assert await tracker.claim("a", "coder", 60_000) is None
    task = await tracker.get_task(tid)
    assert task.dead_letter_reason == "expired"
    assert task.next_eligible_at_ms == DEAD_LETTER_NEVER_MS
    event = next(e for e in await task_events(tracker, tid) if e.kind == "dead_letter")
    assert event.data["reason"] == "expired"
    assert event.data["from_stage"] == "todo"


@pytest.mark.requires(CLOCK, EXTENSIONS)
async def test_queue_ttl_sets_the_deadline(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(dead_letter_stage="failed")
    tid = await tracker.create_task(new_task(pid, queue_ttl_ms=5_000, retry_policy=policy))
    assert (await tracker.get_task(tid)).expires_at_ms == clock() + 5_000
    clock.advance(4_999)
    assert (await claim(tracker, ttl_ms=1_000)).task.id == tid
    clock.advance(1_001)  # the run went stale; the task now waits past its deadline
    assert await tracker.claim("a", "coder", 60_000) is None
    task = await tracker.get_task(tid)
    assert (task.dead_letter_reason, task.stage) == ("expired", "failed")


@pytest.mark.requires(CLOCK, EXTENSIONS)
async def test_pipeline_default_queue_ttl(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker, simple_pipeline(default_queue_ttl_ms=60_000))
    tid = await tracker.create_task(new_task(pid))
    explicit = await tracker.create_task(new_task(pid, queue_ttl_ms=1_000))
    assert (await tracker.get_task(tid)).expires_at_ms == clock() + 60_000
    assert (await tracker.get_task(explicit)).expires_at_ms == clock() + 1_000


@pytest.mark.requires(CLOCK, EXTENSIONS)
async def test_running_task_is_not_expired(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, queue_ttl_ms=1_000))
    lease = await claim(tracker, ttl_ms=60_000)
    clock.advance(5_000)
    assert await tracker.claim("b", "coder", 60_000) is None
    await tracker.heartbeat(lease)
    await tracker.transition(lease, "complete")
    task = await tracker.get_task(tid)
    assert (task.stage, task.dead_letter_reason) == ("done", None)


@pytest.mark.requires(CLOCK, EXTENSIONS)
async def test_no_deadline_by_default(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    assert (await tracker.get_task(tid)).expires_at_ms is None
    clock.advance(10 * 365 * 86_400_000)
    assert (await claim(tracker)).task.id == tid


@pytest.mark.requires(CLOCK, EXTENSIONS, BACKLOG_OPS)
async def test_maintenance_expires_waiting_tasks(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, queue_ttl_ms=1_000) for _ in range(3)])
    await tracker.create_task(new_task(pid, "no deadline"))
    clock.advance(1_001)
    report = await tracker.maintenance()
    assert report.expired_tasks == 3
    assert (await tracker.maintenance()).expired_tasks == 0
    assert [t.title for t in await all_tasks(tracker) if t.dead_letter_reason is None] == [
        "no deadline"
    ]


# -- crash loops --------------------------------------------------------------------------------
@pytest.mark.requires(CLOCK)
async def test_crash_loop_after_max_stale_attempts(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, retry_policy=RetryPolicy(max_attempts=10)))
    for attempt in (1, 2, 3):
        lease = await claim(tracker, ttl_ms=1_000)
        assert lease.run.attempt == attempt
        clock.advance(1_001)
    # the third expiry is reclaimed here: three stale runs in a row -> crash_loop
    assert await tracker.claim("a", "coder", 60_000) is None
    task = await tracker.get_task(tid)
    assert task.dead_letter_reason == "crash_loop"
    assert task.next_eligible_at_ms == DEAD_LETTER_NEVER_MS


@pytest.mark.requires(CLOCK, RUN_DETAILS)
async def test_crash_loop_event_and_stale_runs(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    for _ in range(3):
        await claim(tracker, ttl_ms=1_000)
        clock.advance(1_001)
    assert await tracker.claim("a", "coder", 60_000) is None
    assert [r.status for r in await tracker.list_runs(tid)] == ["stale"] * 3
    event = next(e for e in await task_events(tracker, tid) if e.kind == "dead_letter")
    assert event.data["reason"] == "crash_loop"
    assert event.data["failed_attempts"] == 0


@pytest.mark.requires(CLOCK)
async def test_a_finished_run_breaks_the_stale_streak(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(
        new_task(pid, retry_policy=RetryPolicy(retry_delay_ms=0))
    )  # retry at once
    await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    await tracker.fail(await claim(tracker, ttl_ms=1_000), "a real failure")  # streak: 2 -> 0
    await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    lease = await claim(tracker)  # two stale in a row only
    assert lease.run.attempt == 6
    assert (await tracker.get_task(tid)).dead_letter_reason is None


@pytest.mark.requires(CLOCK, EXTENSIONS)
async def test_task_max_stale_attempts(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, max_stale_attempts=1))
    await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    assert await tracker.claim("a", "coder", 60_000) is None
    assert (await tracker.get_task(tid)).dead_letter_reason == "crash_loop"


@pytest.mark.requires(CLOCK, OPTIONS, BACKLOG_OPS)
async def test_tracker_max_stale_attempts_and_maintenance(
    open_tracker: OpenTracker, clock: FakeClock
) -> None:
    tracker = await open_tracker(max_stale_attempts=2)
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    report = await tracker.maintenance()
    assert (report.expired_leases, report.crash_looped) == (1, 1)
    assert (await tracker.get_task(tid)).dead_letter_reason == "crash_loop"


@pytest.mark.requires(CLOCK, EXTENSIONS, BACKLOG_OPS, "fan_in")
@pytest.mark.parametrize("upstream_first", [True, False], ids=["upstream-older", "upstream-newer"])
async def test_a_task_and_its_dependent_expiring_in_one_pass_dead_letter_it_once(
    tracker: Tracker, clock: FakeClock, upstream_first: bool
) -> None:
    pid = await make_pipeline(tracker)
    if upstream_first:
        upstream = await tracker.create_task(new_task(pid, "up", queue_ttl_ms=1_000))
        child = await tracker.create_task(
            new_task(pid, "child", queue_ttl_ms=1_000, dependencies=[upstream])
        )
    else:  # the dependent is the older task: the edge added afterwards
        child = await tracker.create_task(new_task(pid, "child", queue_ttl_ms=1_000))
        upstream = await tracker.create_task(new_task(pid, "up", queue_ttl_ms=1_000))
        await tracker.add_dependency(child, upstream)
    grandchild = await tracker.create_task(
        new_task(pid, "grandchild", queue_ttl_ms=1_000, dependencies=[child])
    )
    before = (await tracker.get_task(child)).task_version
    clock.advance(1_001)
    report = await tracker.maintenance()
    assert report.expired_tasks == 1  # the upstream; its dependents follow it
    for task_id, cause in ((child, upstream), (grandchild, child)):
        task = await tracker.get_task(task_id)
        assert (task.dead_letter_reason, task.task_version) == ("upstream_dead_lettered", before)
        events = [e for e in await task_events(tracker, task_id) if e.kind == "dead_letter"]
        assert [(e.data["reason"], e.data["upstream_task_id"]) for e in events] == [
            ("upstream_dead_lettered", cause)
        ]
    assert (await tracker.get_task(upstream)).dead_letter_reason == "expired"


@pytest.mark.requires(CLOCK, OPTIONS, BACKLOG_OPS)
async def test_every_sweep_is_counted_wherever_it_runs(
    open_tracker: OpenTracker, clock: FakeClock
) -> None:
    """Expired leases are reclaimed by any claim's housekeeping as well as by maintenance: the
    counts the rail was opened with see every one (the metrics read them)."""
    sweeps = SweepCounts()
    tracker = await open_tracker(sweeps=sweeps)
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    loop = await tracker.create_task(new_task(pid, "loop", max_stale_attempts=1, priority=-1))
    for _ in range(3):  # a worker that dies holding three leases
        await claim(tracker, agent="dead", ttl_ms=1_000)
    clock.advance(1_001)
    assert (await claim(tracker, agent="alive")).task.title in ("a", "b")  # swept in passing
    assert (sweeps.expired_leases, sweeps.crash_looped) == (3, 1)
    assert (await tracker.get_task(loop)).dead_letter_reason == "crash_loop"
    await claim(tracker, agent="dead", ttl_ms=1_000)  # the other of a, b
    clock.advance(1_001)
    assert (await tracker.maintenance()).expired_leases == 1
    assert (sweeps.expired_leases, sweeps.crash_looped) == (4, 1)
    await tracker.maintenance()  # nothing more to sweep: nothing counted twice
    assert (sweeps.expired_leases, sweeps.crash_looped) == (4, 1)


@pytest.mark.requires(CLOCK, EXTENSIONS, BACKLOG_OPS, RUN_DETAILS)
async def test_a_crash_loop_names_its_count_and_knob_and_requeue_starts_it_again(
    open_tracker: OpenTracker, clock: FakeClock
) -> None:
    tracker = await open_tracker(max_stale_attempts=2)
    pid = await make_pipeline(tracker)
    own, rails = await tracker.create_tasks(
        [new_task(pid, "own", max_stale_attempts=1, priority=1), new_task(pid, "rail's")]
    )
    assert (await tracker.get_task(own)).max_stale_attempts == 1
    for expected in (own, rails, rails):  # each claim sweeps the lease the last one left
        assert (await claim(tracker, ttl_ms=1_000)).task.id == expected
        clock.advance(1_001)
    await tracker.maintenance()
    for task_id, limit, of in ((own, 1, "task"), (rails, 2, "rail")):
        task = await tracker.get_task(task_id)
        assert (task.dead_letter_reason, task.stale_streak) == ("crash_loop", limit)
        [event] = [e for e in await task_events(tracker, task_id) if e.kind == "dead_letter"]
        assert (event.data["stale_runs"], event.data["max_stale_attempts"]) == (limit, limit)
        assert event.data["limit_of"] == of
    await tracker.requeue(rails)
    assert (await tracker.get_task(rails)).stale_streak == 0  # the count starts again
    await claim(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    await tracker.maintenance()
    task = await tracker.get_task(rails)
    assert (task.dead_letter_reason, task.stale_streak) == (None, 1)  # one more kill is not a loop
