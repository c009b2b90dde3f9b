"""Idempotency keys: replay without re-applying, conflicts, no stale 'no work', no cached errors."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from tests.contract.support import (
    BACKLOG_OPS,
    CLOCK,
    OPTIONS,
    RUN_DETAILS,
    FakeClock,
    OpenTracker,
    all_tasks,
    claim,
    make_pipeline,
    new_task,
    run_events,
    simple_pipeline,
)
from tracker_client.errors import BacklogFull, Conflict, LeaseLost, NotFound
from tracker_client.models import ArtifactCreate, RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


async def test_create_task_replay_returns_the_same_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    first = await tracker.create_task(new_task(pid, "once"), idempotency_key="k-create")
    again = await tracker.create_task(new_task(pid, "once"), idempotency_key="k-create")
    assert again == first
    assert [t.id for t in await all_tasks(tracker)] == [first]


async def test_same_key_different_arguments_is_a_conflict(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid, "once"), idempotency_key="k-1")
    with pytest.raises(Conflict) as err:
        await tracker.create_task(new_task(pid, "different"), idempotency_key="k-1")
    assert err.value.code == "idempotency_conflict"
    assert len(await all_tasks(tracker)) == 1


async def test_keys_are_scoped_by_operation(tracker: Tracker) -> None:
    pid = await tracker.create_pipeline("p", simple_pipeline(), idempotency_key="shared")
    tid = await tracker.create_task(new_task(pid), idempotency_key="shared")
    assert tid != pid
    assert len(await all_tasks(tracker)) == 1


async def test_bulk_and_pipeline_replays(tracker: Tracker) -> None:
    pid = await tracker.create_pipeline("p", simple_pipeline(), idempotency_key="k-p")
    assert await tracker.create_pipeline("p", simple_pipeline(), idempotency_key="k-p") == pid
    assert len(await tracker.list_pipelines()) == 1
    batch = [new_task(pid, f"t{i}") for i in range(5)]
    ids = await tracker.create_tasks(batch, idempotency_key="k-bulk")
    assert await tracker.create_tasks(batch, idempotency_key="k-bulk") == ids
    assert [t.id for t in await all_tasks(tracker)] == ids


async def test_transition_replay_after_the_lease_is_gone(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    first = await tracker.transition(lease, "complete", idempotency_key="k-t")
    # a retry after a lost answer gets the original success, not LeaseLost
    again = await tracker.transition(lease, "complete", idempotency_key="k-t")
    assert again == first
    assert (await tracker.get_task(tid)).task_version == 2  # applied once
    transitions = [e for e in await run_events(tracker, lease.run.id) if e.kind == "transition"]
    assert len(transitions) == 1
    with pytest.raises(Conflict) as err:
        await tracker.transition(lease, "other", idempotency_key="k-t")
    assert err.value.code == "idempotency_conflict"


async def test_replay_with_another_token_is_not_a_replay(tracker: Tracker) -> None:
    # NullTickets replays a cached success before checking the lease token; here the token's
    # hash is part of the fingerprint, so a forged token gets no stored answer.
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    await tracker.transition(lease, "complete", idempotency_key="k-tok")
    forged = lease.model_copy(update={"lease_token": SecretStr("cd" * 32)})
    with pytest.raises((Conflict, LeaseLost)) as err:
        await tracker.transition(forged, "complete", idempotency_key="k-tok")
    assert err.value.code in ("idempotency_conflict", "invalid_token", "not_found")


@pytest.mark.requires(RUN_DETAILS)
async def test_fail_replay_fails_once(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, retry_policy=RetryPolicy(max_attempts=5)))
    lease = await claim(tracker)
    first = await tracker.fail(lease, "boom", idempotency_key="k-f")
    assert await tracker.fail(lease, "boom", idempotency_key="k-f") == first
    assert [r.status for r in await tracker.list_runs(tid)] == ["failed"]


async def test_event_and_artifact_replays(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    eid = await tracker.add_event(lease, "progress", {"pct": 1}, idempotency_key="k-e")
    assert await tracker.add_event(lease, "progress", {"pct": 1}, idempotency_key="k-e") == eid
    assert [e.id for e in await run_events(tracker, lease.run.id)] == [eid]
    art = ArtifactCreate(kind="log", uri="mem://a", task_id=tid)
    aid = await tracker.add_artifact(art, idempotency_key="k-a")
    assert await tracker.add_artifact(art, idempotency_key="k-a") == aid
    assert [a.id for a in (await tracker.list_artifacts(task_id=tid)).items] == [aid]


async def test_claim_replay_returns_the_same_lease(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    first = await claim(tracker, idempotency_key="k-c")
    again = await claim(tracker, idempotency_key="k-c")
    assert (again.lease_id, again.run.id, again.task.id) == (
        first.lease_id,
        first.run.id,
        first.task.id,
    )
    other = await claim(tracker, idempotency_key="k-c2")
    assert other.task.id != first.task.id
    # the replayed answer is a working lease (whatever became of the first answer's token)
    await tracker.heartbeat(again)
    await tracker.transition(again, "complete")


async def test_a_replayed_claim_answers_the_same_token_and_both_keep_working(
    tracker: Tracker,
) -> None:
    # The original request of a claim can reach the rail after its retry (same key) was
    # answered; whichever answer the worker kept, its heartbeats must go on working.
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    first = await claim(tracker, idempotency_key="k-tok")
    again = await claim(tracker, idempotency_key="k-tok")
    token = first.lease_token.get_secret_value()
    assert again.lease_token.get_secret_value() == token
    assert again.lease_id == first.lease_id
    await tracker.heartbeat(first)  # the first answer's token still holds the lease
    await tracker.heartbeat(again)
    # a different key is a different claim: the next task, not a second lease of this one
    other = await claim(tracker, idempotency_key="k-tok-2")
    assert other.task.id != first.task.id
    assert other.lease_token.get_secret_value() != token
    await tracker.transition(first, "complete")
    with pytest.raises(LeaseLost):
        await tracker.heartbeat(again)  # one lease, finished once


async def test_a_claim_without_a_key_gets_a_fresh_random_token(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    one = await claim(tracker)
    two = await claim(tracker)
    tokens = {one.lease_token.get_secret_value(), two.lease_token.get_secret_value()}
    assert len(tokens) == 2
    assert all(len(t) == 64 and int(t, 16) >= 0 for t in tokens)


async def test_no_work_claim_is_not_replayed(tracker: Tracker) -> None:
    # NullTickets caches the 204 of a claim forever; here a key that found no work is not stored.
    pid = await make_pipeline(tracker)
    assert await tracker.claim("a", "coder", 60_000, idempotency_key="k-empty") is None
    tid = await tracker.create_task(new_task(pid))
    lease = await tracker.claim("a", "coder", 60_000, idempotency_key="k-empty")
    assert lease is not None
    assert lease.task.id == tid


async def test_errors_are_not_cached(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    with pytest.raises(NotFound):
        await tracker.unassign(tid, "agent-x", idempotency_key="k-u")
    await tracker.assign(tid, "agent-x")
    await tracker.unassign(tid, "agent-x", idempotency_key="k-u")  # runs now, not a replay
    assert [a.active for a in await tracker.list_assignments(tid)] == [False]


@pytest.mark.requires(OPTIONS)
async def test_backlog_full_is_not_cached(open_tracker: OpenTracker) -> None:
    tracker = await open_tracker(max_backlog_depth=1)
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid, "fills the backlog"))
    with pytest.raises(BacklogFull):
        await tracker.create_task(new_task(pid, "second"), idempotency_key="k-full")
    await claim(tracker)  # running tasks are not waiting
    tid = await tracker.create_task(new_task(pid, "second"), idempotency_key="k-full")
    assert (await tracker.get_task(tid)).title == "second"


@pytest.mark.requires(OPTIONS, CLOCK, BACKLOG_OPS)
async def test_maintenance_purges_old_keys(open_tracker: OpenTracker, clock: FakeClock) -> None:
    tracker = await open_tracker(idempotency_ttl_s=60)
    pid = await make_pipeline(tracker)
    first = await tracker.create_task(new_task(pid), idempotency_key="k-old")
    clock.advance(61_000)
    assert (await tracker.maintenance()).purged_idempotency_keys >= 1
    second = await tracker.create_task(new_task(pid), idempotency_key="k-old")
    assert second != first
