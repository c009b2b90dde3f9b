"""Leases: heartbeat by the lease's own TTL, expiry, LeaseLost codes, stale runs, attempts."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from tests.contract.support import (
    BACKLOG_OPS,
    CLOCK,
    RUN_DETAILS,
    FakeClock,
    claim,
    make_pipeline,
    new_task,
    review_pipeline,
    runs_of,
    simple_pipeline,
)
from tracker_client.errors import LeaseLost
from tracker_client.models import ArtifactCreate, Lease, RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


async def _leased(tracker: Tracker, ttl_ms: int = 10_000, **fields: object) -> Lease:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid, **fields))  # type: ignore[arg-type]
    return await claim(tracker, ttl_ms=ttl_ms)


async def _assert_all_lost(tracker: Tracker, lease: Lease, code: str) -> None:
    with pytest.raises(LeaseLost) as err:
        await tracker.heartbeat(lease)
    assert err.value.code == code, "heartbeat"
    with pytest.raises(LeaseLost) as err:
        await tracker.add_event(lease, "progress", {"pct": 50})
    assert err.value.code == code, "add_event"
    with pytest.raises(LeaseLost) as err:
        await tracker.transition(lease, "complete")
    assert err.value.code == code, "transition"
    with pytest.raises(LeaseLost) as err:
        await tracker.fail(lease, "too late")
    assert err.value.code == code, "fail"


@pytest.mark.requires(CLOCK)
async def test_heartbeat_extends_by_the_lease_own_ttl(tracker: Tracker, clock: FakeClock) -> None:
    lease = await _leased(tracker, ttl_ms=10_000)
    clock.advance(4_000)
    assert await tracker.heartbeat(lease) == clock() + 10_000  # not now + 300 s
    clock.advance(9_000)  # past the claim's expiry, inside the extended one
    await tracker.add_event(lease, "progress", {"step": 1})
    assert await tracker.heartbeat(lease) == clock() + 10_000


@pytest.mark.requires(CLOCK)
async def test_heartbeat_never_shortens_a_long_lease(tracker: Tracker, clock: FakeClock) -> None:
    lease = await _leased(tracker, ttl_ms=3_600_000)
    clock.advance(1_000)
    assert await tracker.heartbeat(lease) == clock() + 3_600_000


@pytest.mark.requires(CLOCK)
async def test_heartbeat_with_an_explicit_ttl(tracker: Tracker, clock: FakeClock) -> None:
    lease = await _leased(tracker, ttl_ms=10_000)
    clock.advance(1_000)
    assert await tracker.heartbeat(lease, lease_ttl_ms=60_000) == clock() + 60_000


@pytest.mark.requires(CLOCK)
async def test_expired_lease_is_lost_with_code_expired(tracker: Tracker, clock: FakeClock) -> None:
    lease = await _leased(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    await _assert_all_lost(tracker, lease, "expired")


async def test_finished_lease_is_lost_with_code_not_found(tracker: Tracker) -> None:
    lease = await _leased(tracker)
    await tracker.transition(lease, "complete")
    await _assert_all_lost(tracker, lease, "not_found")


async def test_unknown_lease_is_lost_with_code_not_found(tracker: Tracker) -> None:
    lease = await _leased(tracker)
    ghost = lease.model_copy(
        update={
            "lease_id": "00000000-0000-4000-8000-000000000001",
            "run": lease.run.model_copy(update={"id": "00000000-0000-4000-8000-000000000002"}),
        }
    )
    await _assert_all_lost(tracker, ghost, "not_found")
    await tracker.heartbeat(lease)  # the real lease is untouched


async def test_wrong_token_is_lost_with_code_invalid_token(tracker: Tracker) -> None:
    lease = await _leased(tracker)
    forged = lease.model_copy(update={"lease_token": SecretStr("ab" * 32)})
    await _assert_all_lost(tracker, forged, "invalid_token")
    # the real holder keeps its lease and can finish
    await tracker.heartbeat(lease)
    await tracker.transition(lease, "complete")


@pytest.mark.requires(CLOCK)
async def test_expired_task_is_claimable_again_and_old_run_is_stale(
    tracker: Tracker, clock: FakeClock
) -> None:
    first = await _leased(tracker, ttl_ms=1_000)
    clock.advance(999)
    assert await tracker.claim("agent-2", "coder", 60_000) is None  # still live
    clock.advance(2)
    second = await claim(tracker, agent="agent-2")
    assert second.task.id == first.task.id
    assert second.run.attempt == 2
    assert second.lease_id != first.lease_id
    with pytest.raises(LeaseLost):
        await tracker.transition(first, "complete")
    runs = await tracker.get_task(first.task.id)
    assert runs.latest_run is not None
    assert runs.latest_run.id == second.run.id
    assert (await tracker.get_task(first.task.id)).task_version == 1  # expiry changes no version


@pytest.mark.requires(CLOCK, RUN_DETAILS)
async def test_stale_run_is_recorded_with_its_end(tracker: Tracker, clock: FakeClock) -> None:
    first = await _leased(tracker, ttl_ms=1_000)
    clock.advance(1_001)
    await claim(tracker, agent="agent-2")
    stale, running = await runs_of(tracker, first.task.id)
    assert stale.id == first.run.id
    assert stale.status == "stale"
    assert stale.ended_at_ms is not None
    assert running.status == "running"


@pytest.mark.requires(CLOCK, RUN_DETAILS)
async def test_any_claim_reclaims_every_expired_lease(tracker: Tracker, clock: FakeClock) -> None:
    builds = await make_pipeline(tracker, simple_pipeline("builder"))
    tid = await tracker.create_task(new_task(builds))
    await claim(tracker, "builder", ttl_ms=1_000)
    clock.advance(1_001)
    assert await tracker.claim("a", "coder", 60_000) is None  # another role, and no work
    assert [r.status for r in await tracker.list_runs(tid)] == ["stale"]


@pytest.mark.requires(CLOCK, RUN_DETAILS)
async def test_stale_run_is_an_attempt_not_a_failure(tracker: Tracker, clock: FakeClock) -> None:
    first = await _leased(tracker, ttl_ms=1_000, retry_policy=RetryPolicy(max_attempts=2))
    clock.advance(1_001)
    second = await claim(tracker, agent="agent-2")
    assert second.run.attempt == 2
    result = await tracker.fail(second, "boom")
    # one failure (the stale run does not count) < max_attempts 2
    assert result.retry_scheduled is True
    assert result.dead_lettered is False
    task = await tracker.get_task(first.task.id)
    assert task.dead_letter_reason is None


@pytest.mark.requires(CLOCK)
async def test_attempts_count_every_run_of_the_task_across_stages(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    tid = await tracker.create_task(
        new_task(pid, retry_policy=RetryPolicy(retry_delay_ms=0))
    )  # retry at once
    first = await claim(tracker, ttl_ms=1_000)
    assert first.run.attempt == 1
    await tracker.fail(first, "retry me")
    second = await claim(tracker, ttl_ms=1_000)
    assert second.run.attempt == 2
    clock.advance(1_001)  # second goes stale
    third = await claim(tracker)
    assert third.run.attempt == 3
    await tracker.transition(third, "complete")
    fourth = await claim(tracker, "reviewer")
    assert (fourth.task.id, fourth.run.attempt) == (tid, 4)


@pytest.mark.requires(CLOCK, BACKLOG_OPS)
async def test_maintenance_reclaims_expired_leases_without_a_claim(
    tracker: Tracker, clock: FakeClock
) -> None:
    lease = await _leased(tracker, ttl_ms=1_000)
    assert (await tracker.health()).active_leases == 1
    clock.advance(1_001)
    assert (await tracker.health()).active_leases == 0  # an expired lease is not active
    report = await tracker.maintenance()
    assert report.expired_leases == 1
    detail = await tracker.get_task(lease.task.id)
    assert detail.latest_run is not None
    assert detail.latest_run.status == "stale"
    assert (await tracker.maintenance()).expired_leases == 0
    assert (await claim(tracker)).run.attempt == 2


async def test_lease_work_does_not_need_the_lease_for_artifacts(tracker: Tracker) -> None:
    lease = await _leased(tracker)
    art = await tracker.add_artifact(
        ArtifactCreate(kind="log", uri="mem://x.log", task_id=lease.task.id, run_id=lease.run.id)
    )
    await tracker.transition(lease, "complete")
    items = (await tracker.list_artifacts(task_id=lease.task.id)).items
    assert [a.id for a in items] == [art]
