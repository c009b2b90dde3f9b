"""Dependencies: resolution by the upstream's terminal stage, cross-pipeline, flip back, cycles."""

from __future__ import annotations

import pytest

from tests.contract.support import (
    BACKLOG_OPS,
    claim,
    make_pipeline,
    new_task,
    review_pipeline,
    simple_pipeline,
)
from tracker_client.errors import Conflict, NotFound, ValidationFailed
from tracker_client.models import RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


async def test_dependency_hides_the_task_until_upstream_is_terminal(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    builds = await make_pipeline(tracker, simple_pipeline("builder"))
    upstream = await tracker.create_task(new_task(builds, "upstream"))
    downstream = await tracker.create_task(new_task(pid, "downstream", dependencies=[upstream]))

    assert await tracker.claim("a", "coder", 60_000) is None
    deps = await tracker.list_dependencies(downstream)
    assert [(d.depends_on_task_id, d.resolved) for d in deps] == [(upstream, False)]
    detail = await tracker.get_task(downstream)
    assert [(d.depends_on_task_id, d.resolved) for d in detail.dependencies] == [(upstream, False)]

    up_lease = await claim(tracker, "builder")
    assert await tracker.claim("a", "coder", 60_000) is None  # running is not resolved
    await tracker.transition(up_lease, "complete")

    deps = await tracker.list_dependencies(downstream)
    assert [(d.depends_on_task_id, d.resolved) for d in deps] == [(upstream, True)]
    assert (await claim(tracker)).task.id == downstream


async def test_dependency_added_later_blocks_the_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    builds = await make_pipeline(tracker, simple_pipeline("builder"))
    upstream = await tracker.create_task(new_task(builds))
    downstream = await tracker.create_task(new_task(pid))
    await tracker.add_dependency(downstream, upstream)
    assert await tracker.claim("a", "coder", 60_000) is None
    await tracker.transition(await claim(tracker, "builder"), "complete")
    assert (await claim(tracker)).task.id == downstream


async def test_resolution_uses_the_upstream_pipeline_terminal_flag(tracker: Tracker) -> None:
    # The upstream moves to 'review', which is terminal in the downstream's pipeline but not in
    # its own: the dependency must stay unresolved until the upstream reaches its own 'done'.
    upstream_pipeline = await make_pipeline(tracker, review_pipeline())
    downstream_pipeline = await make_pipeline(
        tracker,
        {
            "initial": "build",
            "states": {"build": {"agent_role": "builder"}, "review": {"terminal": True}},
            "transitions": [{"from": "build", "to": "review", "trigger": "built"}],
        },
    )
    upstream = await tracker.create_task(new_task(upstream_pipeline, "upstream"))
    downstream = await tracker.create_task(
        new_task(downstream_pipeline, "downstream", dependencies=[upstream])
    )
    await tracker.transition(await claim(tracker, "coder"), "complete")
    assert (await tracker.get_task(upstream)).stage == "review"
    assert [d.resolved for d in await tracker.list_dependencies(downstream)] == [False]
    assert await tracker.claim("b", "builder", 60_000) is None

    await tracker.transition(await claim(tracker, "reviewer"), "approve")
    assert [d.resolved for d in await tracker.list_dependencies(downstream)] == [True]
    assert (await claim(tracker, "builder")).task.id == downstream


async def test_every_dependency_must_be_resolved(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    builds = await make_pipeline(tracker, simple_pipeline("builder"))
    up1, up2 = await tracker.create_tasks([new_task(builds, "u1"), new_task(builds, "u2")])
    downstream = await tracker.create_task(new_task(pid, dependencies=[up1, up2]))
    await tracker.transition(await claim(tracker, "builder"), "complete")
    assert await tracker.claim("a", "coder", 60_000) is None
    await tracker.transition(await claim(tracker, "builder"), "complete")
    assert (await claim(tracker)).task.id == downstream


@pytest.mark.requires(BACKLOG_OPS)
async def test_resolution_flips_back_when_the_upstream_leaves_its_terminal_stage(
    tracker: Tracker,
) -> None:
    # Dependencies are re-evaluated at every claim: an upstream dead-lettered into a terminal
    # stage does not resolve them (a dead letter never resolves: the dependent is dead-lettered
    # upstream_dead_lettered); requeued out of it, they are still unresolved.
    pid = await make_pipeline(tracker)
    builds = await make_pipeline(tracker, simple_pipeline("builder"))
    policy = RetryPolicy(max_attempts=1, dead_letter_stage="failed")
    upstream = await tracker.create_task(new_task(builds, retry_policy=policy))
    downstream = await tracker.create_task(new_task(pid, dependencies=[upstream]))
    await tracker.fail(await claim(tracker, "builder"), "broken")
    assert (await tracker.get_task(upstream)).stage == "failed"
    assert [d.resolved for d in await tracker.list_dependencies(downstream)] == [False]

    await tracker.requeue(upstream)
    assert (await tracker.get_task(upstream)).stage == "todo"
    assert [d.resolved for d in await tracker.list_dependencies(downstream)] == [False]
    assert await tracker.claim("a", "coder", 60_000) is None


async def test_self_dependency_is_refused(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    with pytest.raises(ValidationFailed) as err:
        await tracker.add_dependency(tid, tid)
    assert err.value.code == "invalid_dependency"
    assert await tracker.list_dependencies(tid) == []


async def test_two_task_cycle_is_refused(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    a, b = await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    await tracker.add_dependency(a, b)
    with pytest.raises(ValidationFailed) as err:
        await tracker.add_dependency(b, a)
    assert err.value.code == "invalid_dependency"
    assert "cycle" in str(err.value).lower()
    assert await tracker.list_dependencies(b) == []


async def test_long_cycle_is_refused_and_named(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    a, b, c, d = await tracker.create_tasks([new_task(pid, n) for n in "abcd"])
    await tracker.add_dependency(a, b)
    await tracker.add_dependency(b, c)
    await tracker.add_dependency(c, d)
    with pytest.raises(ValidationFailed) as err:
        await tracker.add_dependency(d, a)
    assert err.value.code == "invalid_dependency"
    message = str(err.value)
    assert "cycle" in message.lower()
    for tid in (a, b, c, d):
        assert tid in message, f"the cycle's task {tid} is not named in {message!r}"
    assert await tracker.list_dependencies(d) == []
    # a diamond is not a cycle
    await tracker.add_dependency(a, d)


async def test_unknown_tasks_in_dependencies(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    with pytest.raises(NotFound) as err:
        await tracker.add_dependency("00000000-0000-4000-8000-000000000000", tid)
    assert err.value.code == "task_not_found"
    with pytest.raises(NotFound) as err:
        await tracker.add_dependency(tid, "00000000-0000-4000-8000-000000000000")
    assert err.value.code == "dependency_task_not_found"


async def test_duplicate_dependency_is_a_conflict(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    a, b = await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    await tracker.add_dependency(a, b)
    with pytest.raises(Conflict) as err:
        await tracker.add_dependency(a, b)
    assert err.value.code == "duplicate_dependency"
    assert len(await tracker.list_dependencies(a)) == 1


async def test_create_with_unknown_or_duplicate_dependency(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    up = await tracker.create_task(new_task(pid, "up"))
    with pytest.raises(NotFound) as err:
        await tracker.create_task(
            new_task(pid, dependencies=["00000000-0000-4000-8000-000000000000"])
        )
    assert err.value.code == "task_not_found"
    with pytest.raises(Conflict) as err2:
        await tracker.create_task(new_task(pid, dependencies=[up, up]))
    assert err2.value.code == "duplicate_dependency"
    assert [t.id for t in (await tracker.list_tasks()).items] == [up]
