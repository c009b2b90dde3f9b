"""Checkpoints (extension ``checkpoints``): a run's one small JSON value, written alone or with a
heartbeat, handed to the task's next claim as ``previous_checkpoint``; one over 64 KiB is refused
naming the limit, and nothing of that write happens."""

from __future__ import annotations

import pytest

from tests.contract.support import CLOCK, FakeClock, claim, make_pipeline, new_task
from tracker_client.agent_models import MAX_CHECKPOINT_BYTES
from tracker_client.errors import LeaseLost, ValidationFailed
from tracker_client.models import RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.requires("checkpoints")]

AGAIN = RetryPolicy(max_attempts=5, retry_delay_ms=0)


async def test_the_next_attempt_gets_the_latest_checkpoint_of_the_earlier_runs(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, retry_policy=AGAIN))
    first = await claim(tracker)
    assert first.previous_checkpoint is None
    await tracker.checkpoint(first, {"step": 1})
    await tracker.heartbeat(first, checkpoint={"step": 2, "notes": ["a", "b"]})
    await tracker.heartbeat(first)  # no checkpoint: the last one stays
    await tracker.fail(first, "crashed")

    second = await claim(tracker)
    assert (second.task.id, second.previous_checkpoint) == (tid, {"step": 2, "notes": ["a", "b"]})
    await tracker.fail(second, "crashed again, wrote none")  # the latest is still run 1's
    third = await claim(tracker)
    assert third.previous_checkpoint == {"step": 2, "notes": ["a", "b"]}
    await tracker.checkpoint(third, [3])
    await tracker.fail(third, "crashed")
    assert (await claim(tracker)).previous_checkpoint == [3]


async def test_a_checkpoint_does_not_cross_tasks(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, "a", priority=1), new_task(pid, "b")])
    a = await claim(tracker)
    await tracker.checkpoint(a, "a's")
    b = await claim(tracker)
    assert b.previous_checkpoint is None


async def test_an_oversized_checkpoint_is_refused_naming_the_limit(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid, retry_policy=AGAIN))
    lease = await claim(tracker)
    await tracker.checkpoint(lease, {"kept": True})
    big = "x" * MAX_CHECKPOINT_BYTES  # its JSON has two quotes more
    with pytest.raises(ValidationFailed, match=str(MAX_CHECKPOINT_BYTES)):
        await tracker.checkpoint(lease, big)
    with pytest.raises(ValidationFailed, match=str(MAX_CHECKPOINT_BYTES)):
        await tracker.heartbeat(lease, checkpoint={"big": big})
    await tracker.checkpoint(lease, "y" * (MAX_CHECKPOINT_BYTES - 2))  # exactly the limit
    await tracker.checkpoint(lease, {"kept": True})
    await tracker.fail(lease, "crashed")
    assert (await claim(tracker)).previous_checkpoint == {"kept": True}


@pytest.mark.requires(CLOCK)
async def test_a_refused_heartbeat_checkpoint_does_not_extend_the_lease(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker, ttl_ms=10_000)
    clock.advance(6_000)
    with pytest.raises(ValidationFailed):
        await tracker.heartbeat(lease, checkpoint="z" * (MAX_CHECKPOINT_BYTES + 1))
    clock.advance(5_000)  # 11 s after the claim: the lease was not extended
    with pytest.raises(LeaseLost):
        await tracker.checkpoint(lease, "late")


async def test_a_checkpoint_needs_the_live_lease(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    await tracker.transition(lease, "complete")
    with pytest.raises(LeaseLost):
        await tracker.checkpoint(lease, {"after": "the end"})
