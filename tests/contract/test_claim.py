"""Claim: what is chosen, in what order, and what is never handed out."""

from __future__ import annotations

import re

import pytest

from tests.contract.support import (
    CLOCK,
    EXTENSIONS,
    FakeClock,
    claim,
    claim_ids,
    make_pipeline,
    new_task,
    review_pipeline,
    simple_pipeline,
)
from tracker_client.errors import ValidationFailed
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


async def test_claim_returns_a_complete_lease(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, "fix it", priority=3, metadata={"repo": "web"}))

    lease = await claim(tracker, agent="worker-1", ttl_ms=120_000)

    assert lease.task.id == tid
    assert lease.task.stage == "todo"
    assert lease.task.task_version == 1
    assert lease.task.metadata == {"repo": "web"}
    assert lease.run.task_id == tid
    assert lease.run.attempt == 1
    assert lease.run.status == "running"
    assert (lease.run.agent_id, lease.run.agent_role) == ("worker-1", "coder")
    assert lease.run.ended_at_ms is None
    token = lease.lease_token.get_secret_value()
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    assert token not in repr(lease)
    assert token not in str(lease)
    assert await tracker.claim("worker-2", "coder", 60_000) is None


@pytest.mark.requires(CLOCK)
async def test_lease_expiry_is_now_plus_ttl(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker, ttl_ms=120_000)
    assert lease.expires_at_ms == clock() + 120_000
    assert lease.run.started_at_ms == clock()


async def test_claim_does_not_change_the_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    before = await tracker.get_task(tid)
    await claim(tracker)
    after = await tracker.get_task(tid)
    assert (after.stage, after.task_version, after.updated_at_ms) == (
        before.stage,
        before.task_version,
        before.updated_at_ms,
    )
    assert after.latest_run is not None
    assert after.latest_run.status == "running"


async def test_claim_for_a_role_without_stages_is_none(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    assert await tracker.claim("a", "nobody", 60_000) is None


async def test_order_is_priority_then_creation(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker)
    plan = [("p0-old", 0), ("p5-a", 5), ("p1-a", 1), ("p5-b", 5), ("p-3", -3), ("p1-b", 1)]
    ids = {}
    for title, priority in plan:
        ids[title] = await tracker.create_task(new_task(pid, title, priority=priority))
        clock.advance(1)
    expected = ["p5-a", "p5-b", "p1-a", "p1-b", "p0-old", "p-3"]
    assert await claim_ids(tracker) == [ids[t] for t in expected]


async def test_same_millisecond_tasks_keep_creation_order(tracker: Tracker) -> None:
    # The fake clock does not move: every task is created in the same millisecond. Random ids
    # must not decide the order.
    pid = await make_pipeline(tracker)
    single = [await tracker.create_task(new_task(pid, f"s{i}")) for i in range(15)]
    bulk = await tracker.create_tasks([new_task(pid, f"b{i}") for i in range(15)])
    assert await claim_ids(tracker) == single + bulk


async def test_order_across_pipelines_of_one_role(tracker: Tracker, clock: FakeClock) -> None:
    a = await make_pipeline(tracker)
    b = await make_pipeline(tracker)
    b_old = await tracker.create_task(new_task(b, "b-old"))
    clock.advance(5)
    a_new = await tracker.create_task(new_task(a, "a-new"))
    clock.advance(5)
    b_hi = await tracker.create_task(new_task(b, "b-hi", priority=2))
    assert await claim_ids(tracker) == [b_hi, b_old, a_new]


async def test_no_starvation_behind_blocked_dependencies(tracker: Tracker) -> None:
    # NullTickets looks at 20 candidates per stage before filtering: 21+ blocked higher-priority
    # tasks hid the free one. Here the free task must be found.
    pid = await make_pipeline(tracker)
    other = await make_pipeline(tracker, simple_pipeline("builder"))
    upstream = await tracker.create_task(new_task(other, "upstream"))
    blocked = await tracker.create_tasks(
        [new_task(pid, f"blocked{i}", priority=10, dependencies=[upstream]) for i in range(25)]
    )
    free = await tracker.create_task(new_task(pid, "free", priority=0))
    lease = await claim(tracker)
    assert lease.task.id == free
    assert await tracker.claim("agent-1", "coder", 60_000) is None
    assert set(blocked).isdisjoint({lease.task.id})


async def test_no_starvation_behind_assignments(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    mine = await tracker.create_tasks(
        [new_task(pid, f"x{i}", priority=10, assigned_agent_id="agent-x") for i in range(25)]
    )
    free = await tracker.create_task(new_task(pid, "free"))
    lease = await claim(tracker, agent="agent-y")
    assert lease.task.id == free
    assert await tracker.claim("agent-y", "coder", 60_000) is None
    lease_x = await claim(tracker, agent="agent-x")
    assert lease_x.task.id == mine[0]


async def test_terminal_stage_with_a_role_is_not_claimable(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    tid = await tracker.create_task(new_task(pid))
    await tracker.transition(await claim(tracker, "coder"), "complete")
    await tracker.transition(await claim(tracker, "reviewer"), "approve")
    assert (await tracker.get_task(tid)).stage == "done"
    assert await tracker.claim("agent-1", "archiver", 60_000) is None


@pytest.mark.parametrize("ttl", [0, -1, 86_400_001])
async def test_lease_ttl_out_of_range_is_refused(tracker: Tracker, ttl: int) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    with pytest.raises(ValidationFailed) as err:
        await tracker.claim("a", "coder", ttl)
    assert err.value.code == "invalid_lease_ttl"
    assert "lease_ttl_ms" in str(err.value)
    detail = await tracker.get_task(tid)
    assert detail.latest_run is None


@pytest.mark.parametrize("ttl", [1, 86_400_000])
async def test_lease_ttl_bounds_are_accepted(tracker: Tracker, ttl: int) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    assert (await claim(tracker, ttl_ms=ttl)).run.attempt == 1


async def test_assignment_reserves_the_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, review_pipeline())
    tid = await tracker.create_task(new_task(pid))
    await tracker.assign(tid, "agent-x", assigned_by="lead")
    assert await tracker.claim("agent-y", "coder", 60_000) is None
    lease = await claim(tracker, agent="agent-x")
    assert lease.task.id == tid
    await tracker.transition(lease, "complete")
    # the assignment survives the transition: only agent-x, whatever the role
    assert await tracker.claim("agent-y", "reviewer", 60_000) is None
    assert (await claim(tracker, "reviewer", agent="agent-x")).task.id == tid


async def test_unassign_releases_the_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, assigned_agent_id="agent-x", assigned_by="ops"))
    assert await tracker.claim("agent-y", "coder", 60_000) is None
    await tracker.unassign(tid, "agent-x")
    assert (await claim(tracker, agent="agent-y")).task.id == tid


async def test_assignments_are_listed_with_inactive_ones(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    await tracker.assign(tid, "agent-x", assigned_by="lead")
    await tracker.assign(tid, "agent-y")
    listed = {a.agent_id: a for a in await tracker.list_assignments(tid)}
    assert listed["agent-x"].active is False
    assert listed["agent-x"].assigned_by == "lead"
    assert listed["agent-y"].active is True
    detail = await tracker.get_task(tid)
    assert {a.agent_id: a.active for a in detail.assignments} == {"agent-x": False, "agent-y": True}
    assert await tracker.claim("agent-x", "coder", 60_000) is None
    assert (await claim(tracker, agent="agent-y")).task.id == tid


async def test_unassign_without_active_assignment_is_not_found(tracker: Tracker) -> None:
    from tracker_client.errors import NotFound

    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    with pytest.raises(NotFound):
        await tracker.unassign(tid, "agent-x")
    with pytest.raises(NotFound):
        await tracker.assign("no-such-task", "agent-x")


async def test_per_state_limit_counts_live_leases_by_stage_name(tracker: Tracker) -> None:
    p1 = await make_pipeline(tracker)
    p2 = await make_pipeline(tracker, simple_pipeline("r2"))
    await tracker.create_tasks([new_task(p1, f"t{i}") for i in range(3)])
    await tracker.create_task(new_task(p2, "other-role"))
    first = await claim(tracker, per_state={"todo": 2})
    await claim(tracker, per_state={"todo": 2})
    assert await tracker.claim("a", "coder", 60_000, per_state={"todo": 2}) is None
    # the count is by stage name across pipelines and roles
    assert await tracker.claim("b", "r2", 60_000, per_state={"todo": 2}) is None
    # other stages' limits do not apply
    assert (await claim(tracker, per_state={"review": 1})).task.stage == "todo"
    await tracker.transition(first, "complete")
    assert (await claim(tracker, "r2", per_state={"todo": 3})).task.title == "other-role"


@pytest.mark.parametrize("limit", [0, -1])
async def test_per_state_non_positive_limits_are_ignored(tracker: Tracker, limit: int) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(3)])
    for _ in range(3):
        await claim(tracker, per_state={"todo": limit})


@pytest.mark.requires(EXTENSIONS)
async def test_concurrency_key_allows_one_live_lease_per_key(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    a = await tracker.create_task(new_task(pid, "a", priority=5, concurrency_key="conv-1"))
    same = await tracker.create_tasks(
        [new_task(pid, f"same{i}", priority=5, concurrency_key="conv-1") for i in range(25)]
    )
    other_key = await tracker.create_task(new_task(pid, "k2", priority=1, concurrency_key="conv-2"))
    free = await tracker.create_task(new_task(pid, "free", priority=0))

    lease_a = await claim(tracker)
    assert lease_a.task.id == a
    assert lease_a.task.concurrency_key == "conv-1"
    # the 25 tasks of conv-1 are skipped without blocking unrelated work behind them
    assert (await claim(tracker)).task.id == other_key
    assert (await claim(tracker)).task.id == free
    assert await tracker.claim("agent-1", "coder", 60_000) is None
    await tracker.transition(lease_a, "complete")
    assert (await claim(tracker)).task.id == same[0]
    assert await tracker.claim("agent-1", "coder", 60_000) is None
