"""Queue statistics and health figures."""

from __future__ import annotations

import pytest

from tests.contract.support import (
    CLOCK,
    EXTENSIONS,
    OPTIONS,
    FakeClock,
    OpenTracker,
    claim,
    make_pipeline,
    new_task,
    review_pipeline,
    simple_pipeline,
)
from tracker_client.models import RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


@pytest.mark.requires(CLOCK)
async def test_queue_stats_figures(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    builds = await make_pipeline(tracker, simple_pipeline("builder"))
    upstream = await tracker.create_task(new_task(builds, "upstream"))
    clock.advance(10)
    waiting = await tracker.create_task(new_task(pid, "waiting"))
    clock.advance(10)
    running = await tracker.create_task(new_task(pid, "running", priority=9))
    await tracker.create_task(
        new_task(pid, "delayed", priority=8, retry_policy=RetryPolicy(retry_delay_ms=60_000))
    )
    await tracker.create_task(
        new_task(
            pid,
            "dead",
            priority=7,
            retry_policy=RetryPolicy(max_attempts=0, dead_letter_stage="failed"),
        )
    )
    await tracker.create_task(new_task(pid, "assigned", assigned_agent_id="x"))
    await tracker.create_task(new_task(pid, "blocked", dependencies=[upstream]))

    lease = await claim(tracker, ttl_ms=30_000)
    assert lease.task.id == running
    await tracker.fail(await claim(tracker), "later")  # delayed
    await tracker.fail(await claim(tracker), "fatal")  # dead
    clock.advance(1_000)
    now = clock()

    stats = await tracker.queue_stats(near_expiry_ms=60_000, stuck_ms=0)
    assert stats.generated_at_ms == now
    # one entry per role of a non-terminal state: archiver (terminal 'done') is not a queue
    assert {r.role for r in stats.roles} == {"coder", "reviewer", "triager", "builder"}
    coder = stats.for_role("coder")
    assert coder is not None
    # claimable ignores assignments; not the running, delayed, dead or blocked ones
    assert coder.claimable_count == 2
    assert coder.oldest_claimable_age_ms == now - (await tracker.get_task(waiting)).created_at_ms
    assert coder.waiting_count == 4  # waiting, delayed, assigned, blocked
    assert coder.running_count == 1
    assert coder.dead_letter_count == 1
    assert coder.failed_count == 1  # the delayed task's failure; 'dead' now sits in 'failed'
    assert coder.stuck_count == 1
    assert coder.near_expiry_leases == 1
    assert coder.max_backlog_depth == 100_000

    reviewer = stats.for_role("reviewer")
    assert reviewer is not None
    assert (reviewer.claimable_count, reviewer.waiting_count, reviewer.running_count) == (0, 0, 0)
    assert reviewer.oldest_claimable_age_ms is None

    later = (await tracker.queue_stats(near_expiry_ms=10_000, stuck_ms=5_000)).for_role("coder")
    assert later is not None
    assert (later.near_expiry_leases, later.stuck_count) == (0, 0)


async def test_claimable_count_has_no_cap(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(30)])
    coder = (await tracker.queue_stats()).for_role("coder")
    assert coder is not None
    assert coder.claimable_count == 30
    assert coder.waiting_count in (30, None)


@pytest.mark.requires(OPTIONS)
async def test_queue_stats_show_the_effective_cap(open_tracker: OpenTracker) -> None:
    tracker = await open_tracker(max_backlog_depth=0, role_backlog_depth={"coder": 10})
    await make_pipeline(tracker, review_pipeline())
    stats = await tracker.queue_stats()
    assert stats.for_role("coder").max_backlog_depth == 10  # type: ignore[union-attr]
    assert stats.for_role("reviewer").max_backlog_depth == 0  # type: ignore[union-attr]


@pytest.mark.requires(CLOCK)
async def test_health_counts_stages_and_live_leases(tracker: Tracker, clock: FakeClock) -> None:
    health = await tracker.health()
    assert health.status == "ok"
    assert health.version
    assert (health.tasks_by_stage, health.active_leases) == ([], 0)

    a = await make_pipeline(tracker, review_pipeline())
    b = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(a, "a1"), new_task(a, "a2"), new_task(b, "b1")])
    await tracker.transition(await claim(tracker), "complete")
    await claim(tracker, ttl_ms=1_000)
    health = await tracker.health()
    assert [(s.stage, s.count) for s in health.tasks_by_stage] == [("review", 1), ("todo", 2)]
    assert health.active_leases == 1
    clock.advance(1_001)
    assert (await tracker.health()).active_leases == 0


async def test_ping_answers_whatever_the_rail_holds(tracker: Tracker) -> None:
    # The worker's start-up probe (worker.daemon.worker): a round trip that counts nothing.
    assert await tracker.ping() is None
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(3)])
    await claim(tracker)
    assert await tracker.ping() is None


@pytest.mark.requires(EXTENSIONS)
async def test_claimable_count_respects_concurrency_keys(tracker: Tracker) -> None:
    # claimable = eligible ignoring only assignments and per_state: a task whose key is held by
    # a live lease is not claimable by anyone, so it is not counted.
    pid = await make_pipeline(tracker)
    await tracker.create_tasks(
        [new_task(pid, f"k{i}", concurrency_key="conv-1") for i in range(3)]
        + [new_task(pid, "free")]
    )
    await claim(tracker)  # k0 holds conv-1
    coder = (await tracker.queue_stats()).for_role("coder")
    assert coder is not None
    assert coder.claimable_count == 1
    assert coder.waiting_count == 3


async def test_dead_letters_count_for_the_role_they_left(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    policy = RetryPolicy(max_attempts=1, dead_letter_stage="parked")
    await tracker.create_task(new_task(pid, retry_policy=policy))
    await tracker.fail(await claim(tracker), "fatal")  # into 'parked', a triager stage
    stats = await tracker.queue_stats()
    coder, triager = stats.for_role("coder"), stats.for_role("triager")
    assert coder is not None
    assert triager is not None
    assert (coder.dead_letter_count, triager.dead_letter_count) == (1, 0)
    assert (triager.waiting_count, triager.claimable_count) == (0, 0)
