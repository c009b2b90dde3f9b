"""``claim_many`` (extension ``claim_many``): up to ``n`` leases of a role in one write.

Run over every rail that declares it (embedded, the served tracker through the remote client):
the batch follows ``claim``'s rules as if its claims were made one after the other (order,
dependencies, assignments, concurrency keys, ``per_state`` limits, the role's rate limit and
cap), answers fewer (or none) when less work is eligible, replays under its key, and refuses an
``n`` outside 1..100 naming it, writing nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.support import EXTENSIONS, claim, make_pipeline, new_task
from tracker_client.errors import ValidationFailed
from tracker_client.models import Lease
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.requires("claim_many")]


async def claim_many(
    tracker: Tracker, n: int, agent: str = "agent-1", role: str = "coder", **kw: Any
) -> list[Lease]:
    """``call("claim_many", ...)`` with the suite's defaults."""
    leases: list[Lease] = await tracker.call(
        "claim_many", agent_id=agent, agent_role=role, lease_ttl_ms=60_000, n=n, **kw
    )
    return leases


async def test_claims_up_to_n_in_claim_order_with_usable_leases(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    low = await tracker.create_task(new_task(pid, "low", priority=1))
    first = await tracker.create_task(new_task(pid, "first", priority=5))
    second = await tracker.create_task(new_task(pid, "second", priority=5))
    last = await tracker.create_task(new_task(pid, "last", priority=0))

    batch = await claim_many(tracker, 3)

    assert [x.task.id for x in batch] == [first, second, low]
    assert len({x.run.id for x in batch}) == 3 and len({x.lease_id for x in batch}) == 3
    assert all(x.run.status == "running" and x.run.agent_id == "agent-1" for x in batch)
    for lease in batch:  # each lease is a real one: its token moves its task
        result = await tracker.transition(lease, "complete")
        assert result.new_stage == "done"
    rest = await claim_many(tracker, 5)
    assert [x.task.id for x in rest] == [last]
    assert await claim_many(tracker, 5) == []


async def test_skips_what_claim_skips(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    blocker = await tracker.create_task(new_task(pid, "blocker", priority=1))
    blocked = await tracker.create_task(new_task(pid, "blocked", priority=9))
    await tracker.add_dependency(blocked, blocker)
    theirs = await tracker.create_task(new_task(pid, "theirs", priority=8))
    await tracker.assign(theirs, "agent-2")
    mine = await tracker.create_task(new_task(pid, "mine", priority=7))
    await tracker.assign(mine, "agent-1")

    batch = await claim_many(tracker, 10)

    assert [x.task.id for x in batch] == [mine, blocker]
    assert [x.task.id for x in await claim_many(tracker, 10, agent="agent-2")] == [theirs]


@pytest.mark.requires(EXTENSIONS)
async def test_one_lease_per_concurrency_key_in_a_batch_and_beside_held_ones(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    a1 = await tracker.create_task(new_task(pid, "a1", priority=9, concurrency_key="a"))
    await tracker.create_task(new_task(pid, "a2", priority=8, concurrency_key="a"))
    b1 = await tracker.create_task(new_task(pid, "b1", priority=7, concurrency_key="b"))
    free = await tracker.create_task(new_task(pid, "free", priority=1))
    held = await claim(tracker)  # a1: key "a" is now held
    assert held.task.id == a1

    batch = await claim_many(tracker, 10)

    assert [x.task.id for x in batch] == [b1, free]


@pytest.mark.requires(EXTENSIONS)
async def test_two_candidates_sharing_a_key_in_one_batch_lease_only_the_first(
    tracker: Tracker,
) -> None:
    # The PostgreSQL rail takes a batch's candidates in one scan and cuts it after the first
    # keyed one; the slots left are claimed one by one, seeing that grant.
    pid = await make_pipeline(tracker)
    x = await tracker.create_task(new_task(pid, "x", priority=9))
    a1 = await tracker.create_task(new_task(pid, "a1", priority=8, concurrency_key="a"))
    await tracker.create_task(new_task(pid, "a2", priority=7, concurrency_key="a"))
    y = await tracker.create_task(new_task(pid, "y", priority=6))
    b1 = await tracker.create_task(new_task(pid, "b1", priority=5, concurrency_key="b"))
    z = await tracker.create_task(new_task(pid, "z", priority=4))

    batch = await claim_many(tracker, 10)

    assert [lease.task.id for lease in batch] == [x, a1, y, b1, z]
    assert len({lease.run.id for lease in batch}) == 5


async def test_per_state_limits_count_the_batch(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    for i in range(4):
        await tracker.create_task(new_task(pid, f"t{i}"))
    await claim(tracker)

    batch = await claim_many(tracker, 10, concurrency={"per_state": {"todo": 3}})

    assert len(batch) == 2  # one lease was out already: 3 at most in "todo"


@pytest.mark.requires("rate_limits")
async def test_the_roles_cap_stops_the_batch(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    for i in range(5):
        await tracker.create_task(new_task(pid, f"t{i}"))
    await tracker.call("set_rate_limit", "coder", max_running=2)

    assert len(await claim_many(tracker, 5)) == 2
    assert await claim_many(tracker, 5) == []


async def test_a_replay_with_the_key_answers_the_same_leases(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    for i in range(3):
        await tracker.create_task(new_task(pid, f"t{i}"))

    first = await claim_many(tracker, 2, idempotency_key="batch-1")
    again = await claim_many(tracker, 2, idempotency_key="batch-1")

    assert [x.lease_id for x in again] == [x.lease_id for x in first]
    assert [x.run.id for x in again] == [x.run.id for x in first]
    assert len(await claim_many(tracker, 5)) == 1  # the replay leased nothing more


async def test_a_replay_answers_the_same_tokens_and_the_first_answer_keeps_working(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    for i in range(3):
        await tracker.create_task(new_task(pid, f"t{i}"))

    first = await claim_many(tracker, 2, idempotency_key="batch-tok")
    again = await claim_many(tracker, 2, idempotency_key="batch-tok")

    tokens = [x.lease_token.get_secret_value() for x in first]
    assert [x.lease_token.get_secret_value() for x in again] == tokens
    assert len(set(tokens)) == 2  # one key, two leases: two tokens
    for lease in first:
        await tracker.heartbeat(lease)


async def test_the_typed_method_is_the_call(tracker: Tracker) -> None:
    """``Tracker.claim_many`` (what the worker calls) is the operation ``call`` reaches: a
    replay through one under the other's key answers the same leases."""
    pid = await make_pipeline(tracker)
    for i in range(3):
        await tracker.create_task(new_task(pid, f"t{i}"))

    typed = await tracker.claim_many("agent-1", "coder", 60_000, 2, idempotency_key="batch-2")
    by_name = await claim_many(tracker, 2, idempotency_key="batch-2")

    assert all(isinstance(x, Lease) for x in typed) and len(typed) == 2
    assert [x.run.id for x in by_name] == [x.run.id for x in typed]
    left = await tracker.claim_many("agent-1", "coder", 60_000, 5)
    assert [x.task.title for x in left] == ["t2"]


@pytest.mark.parametrize("n", [0, -1, 101])
async def test_an_n_outside_1_to_100_is_refused_naming_it(tracker: Tracker, n: int) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))

    with pytest.raises(ValidationFailed, match=r"\bn\b"):
        await claim_many(tracker, n)

    assert (await tracker.get_task(tid)).latest_run is None  # nothing was leased
    assert (await claim(tracker)).task.id == tid
