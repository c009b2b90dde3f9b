"""What a task's next run reads of its dependencies (extension ``upstream``), and the
upstream-failure rule: a dependency that is dead-lettered or cancelled never resolves, so its
waiting dependents are dead-lettered (``upstream_dead_lettered`` / ``upstream_cancelled``) down
the graph, in the same write; requeueing the upstream does not revive them."""

from __future__ import annotations

import pytest

from tests.contract.support import (
    BACKLOG_OPS,
    all_tasks,
    claim,
    make_pipeline,
    new_task,
    simple_pipeline,
    task_events,
)
from tests.contract.test_fan_in import planner_pipeline
from tracker_client.errors import LeaseLost, NotFound
from tracker_client.models import ArtifactCreate, RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio

UNKNOWN = "00000000-0000-4000-8000-0000000ab0de"
ONCE = RetryPolicy(max_attempts=1)


@pytest.mark.requires("upstream", "fan_in")
async def test_upstream_lists_each_dependency_outcome_result_and_artifacts(
    tracker: Tracker,
) -> None:
    plans = await make_pipeline(tracker, planner_pipeline())
    works = await make_pipeline(tracker, simple_pipeline("worker"))
    parent = await tracker.create_task(new_task(plans, "plan"))
    done, failed, pending = await tracker.create_tasks(
        [
            new_task(works, "done"),
            new_task(works, "failed", retry_policy=ONCE),
            new_task(works, "pending"),
        ]
    )
    await tracker.transition(await claim(tracker, "planner"), "split", wait_for=[done, pending])
    await tracker.add_dependency(parent, failed)
    lease = await claim(tracker, "worker")
    await tracker.add_event(lease, "result", {"answer": 1})
    await tracker.add_event(lease, "result", {"answer": 42})
    await tracker.add_artifact(
        ArtifactCreate(kind="file", uri="file:///tmp/out.txt", task_id=done, run_id=lease.run_id)
    )
    await tracker.transition(lease, "complete")
    await tracker.fail(await claim(tracker, "worker"), "broken")

    got = {u.task_id: u for u in await tracker.list_upstream(parent)}
    assert [u.task_id for u in await tracker.list_upstream(parent)] == [done, pending, failed]
    assert (got[done].outcome, got[done].stage, got[done].title) == ("done", "done", "done")
    assert got[done].result == {"answer": 42}
    assert [a.uri for a in got[done].artifacts] == ["file:///tmp/out.txt"]
    assert (got[pending].outcome, got[pending].result, got[pending].artifacts) == (
        "pending",
        None,
        [],
    )
    assert got[failed].outcome == "dead_lettered"
    assert await tracker.list_upstream(done) == []
    with pytest.raises(NotFound, match=UNKNOWN):
        await tracker.list_upstream(UNKNOWN)


@pytest.mark.requires("fan_in")
async def test_dependents_of_a_dead_lettered_task_are_dead_lettered_down_the_graph(
    tracker: Tracker,
) -> None:
    works = await make_pipeline(tracker, simple_pipeline("worker", retry={"max_attempts": 1}))
    pid = await make_pipeline(tracker)
    upstream = await tracker.create_task(new_task(works, "upstream"))
    child = await tracker.create_task(new_task(pid, "child", dependencies=[upstream]))
    grandchild = await tracker.create_task(new_task(pid, "grandchild", dependencies=[child]))
    bystander = await tracker.create_task(new_task(pid, "bystander"))

    result = await tracker.fail(await claim(tracker, "worker"), "broken")
    assert result.dead_lettered
    state = {t.id: t.dead_letter_reason for t in await all_tasks(tracker)}
    assert state == {
        upstream: "max_attempts_exceeded",
        child: "upstream_dead_lettered",
        grandchild: "upstream_dead_lettered",
        bystander: None,
    }
    events = [e for e in await task_events(tracker, grandchild) if e.kind == "dead_letter"]
    assert [e.data["upstream_task_id"] for e in events] == [child]
    assert (await claim(tracker)).task.id == bystander
    assert await tracker.claim("a", "coder", 60_000) is None


@pytest.mark.requires("fan_in", BACKLOG_OPS)
async def test_a_dead_letter_stage_that_is_terminal_does_not_let_dependents_run(
    tracker: Tracker,
) -> None:
    works = await make_pipeline(tracker, simple_pipeline("worker"))
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(max_attempts=1, dead_letter_stage="failed")
    upstream = await tracker.create_task(new_task(works, "upstream", retry_policy=policy))
    child = await tracker.create_task(new_task(pid, "child", dependencies=[upstream]))
    await tracker.fail(await claim(tracker, "worker"), "broken")
    assert (await tracker.get_task(upstream)).stage == "failed"  # terminal, but dead-lettered
    assert (await tracker.get_task(child)).dead_letter_reason == "upstream_dead_lettered"
    assert await tracker.claim("a", "coder", 60_000) is None


@pytest.mark.requires("fan_in", BACKLOG_OPS)
async def test_cancelling_an_upstream_dead_letters_its_dependents_upstream_cancelled(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    upstream = await tracker.create_task(new_task(pid, "upstream"))
    child = await tracker.create_task(new_task(pid, "child", dependencies=[upstream]))
    grandchild = await tracker.create_task(new_task(pid, "grandchild", dependencies=[child]))
    await tracker.cancel(upstream)
    assert (await tracker.get_task(child)).dead_letter_reason == "upstream_cancelled"
    assert (await tracker.get_task(grandchild)).dead_letter_reason == "upstream_cancelled"
    waited = (
        await tracker.wait(child, timeout_s=0.1) if (await tracker.capabilities()).wait else None
    )
    assert waited is None or (waited.finished and waited.outcome == "dead_lettered")


@pytest.mark.requires("fan_in", BACKLOG_OPS)
async def test_requeueing_the_upstream_does_not_revive_its_dependents(tracker: Tracker) -> None:
    works = await make_pipeline(tracker, simple_pipeline("worker", retry={"max_attempts": 1}))
    pid = await make_pipeline(tracker)
    upstream = await tracker.create_task(new_task(works, "upstream"))
    child = await tracker.create_task(new_task(pid, "child", dependencies=[upstream]))
    await tracker.fail(await claim(tracker, "worker"), "broken")
    await tracker.requeue(upstream)
    assert (await tracker.get_task(child)).dead_letter_reason == "upstream_dead_lettered"
    await tracker.transition(await claim(tracker, "worker"), "complete")
    assert await tracker.claim("a", "coder", 60_000) is None  # still dead-lettered
    await tracker.requeue(child)  # requeued too, it runs: its upstream is done now
    assert (await claim(tracker)).task.id == child


@pytest.mark.requires("fan_in", BACKLOG_OPS)
async def test_requeue_all_by_reason_brings_the_dependents_back(tracker: Tracker) -> None:
    works = await make_pipeline(tracker, simple_pipeline("worker", retry={"max_attempts": 1}))
    pid = await make_pipeline(tracker)
    upstream = await tracker.create_task(new_task(works, "upstream"))
    kids = await tracker.create_tasks(
        [new_task(pid, f"child {i}", dependencies=[upstream]) for i in range(3)]
    )
    await tracker.fail(await claim(tracker, "worker"), "broken")
    await tracker.requeue(upstream)
    await tracker.transition(await claim(tracker, "worker"), "complete")
    result = await tracker.call("requeue_all", pipeline_id=pid, reason="upstream_dead_lettered")
    assert (result.requeued, result.by_reason) == (3, {"upstream_dead_lettered": 3})
    assert sorted([(await claim(tracker)).task.id for _ in kids]) == sorted(kids)


@pytest.mark.requires("fan_in")
async def test_waiting_for_an_already_dead_lettered_task_dead_letters_the_waiter(
    tracker: Tracker,
) -> None:
    plans = await make_pipeline(tracker, planner_pipeline())
    works = await make_pipeline(tracker, simple_pipeline("worker", retry={"max_attempts": 1}))
    parent = await tracker.create_task(new_task(plans, "plan"))
    dead, alive = await tracker.create_tasks([new_task(works, "dead"), new_task(works, "ok")])
    await tracker.fail(await claim(tracker, "worker"), "broken")
    result = await tracker.transition(
        await claim(tracker, "planner"), "split", wait_for=[alive, dead]
    )
    assert result.new_stage == "summarise"
    task = await tracker.get_task(parent)
    assert (task.stage, task.dead_letter_reason) == ("summarise", "upstream_dead_lettered")


@pytest.mark.requires("fan_in", BACKLOG_OPS)
async def test_a_dependent_requeued_before_its_upstream_still_waits(tracker: Tracker) -> None:
    works = await make_pipeline(tracker, simple_pipeline("worker"))
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(max_attempts=1, dead_letter_stage="failed")
    upstream = await tracker.create_task(new_task(works, "upstream", retry_policy=policy))
    child = await tracker.create_task(new_task(pid, "child", dependencies=[upstream]))
    await tracker.fail(await claim(tracker, "worker"), "broken")
    await tracker.requeue(child)  # the upstream is still dead-lettered (in a terminal stage)
    assert [d.resolved for d in await tracker.list_dependencies(child)] == [False]
    assert await tracker.claim("a", "coder", 60_000) is None
    coder = [r for r in (await tracker.queue_stats()).roles if r.role == "coder"]
    assert [r.claimable_count for r in coder] in ([], [0])
    await tracker.requeue(upstream)
    await tracker.transition(await claim(tracker, "worker"), "complete")
    assert (await claim(tracker)).task.id == child


@pytest.mark.requires("fan_in", BACKLOG_OPS)
async def test_a_task_created_on_a_dead_or_cancelled_upstream_is_dead_lettered_at_once(
    tracker: Tracker,
) -> None:
    works = await make_pipeline(tracker, simple_pipeline("worker", retry={"max_attempts": 1}))
    pid = await make_pipeline(tracker)
    dead, gone = await tracker.create_tasks([new_task(works, "dead"), new_task(works, "gone")])
    await tracker.fail(await claim(tracker, "worker"), "broken")
    await tracker.cancel(gone)
    on_dead = await tracker.create_task(new_task(pid, "on dead", dependencies=[dead]))
    on_gone, on_both = await tracker.create_tasks(
        [
            new_task(pid, "on cancelled", dependencies=[gone]),
            new_task(pid, "on both", dependencies=[gone, dead]),
        ]
    )
    reasons = {t.id: t.dead_letter_reason for t in await all_tasks(tracker)}
    assert (reasons[on_dead], reasons[on_gone], reasons[on_both]) == (
        "upstream_dead_lettered",
        "upstream_cancelled",
        "upstream_cancelled",  # the first dependency listed that never resolves
    )
    events = [e for e in await task_events(tracker, on_dead) if e.kind == "dead_letter"]
    assert [e.data["upstream_task_id"] for e in events] == [dead]
    assert await tracker.claim("a", "coder", 60_000) is None
    waited = (
        await tracker.wait(on_dead, timeout_s=0.1) if (await tracker.capabilities()).wait else None
    )
    assert waited is None or (waited.finished and waited.outcome == "dead_lettered")


@pytest.mark.requires("fan_in", BACKLOG_OPS)
async def test_adding_a_dependency_on_a_dead_upstream_dead_letters_the_task_at_once(
    tracker: Tracker,
) -> None:
    works = await make_pipeline(tracker, simple_pipeline("worker", retry={"max_attempts": 1}))
    pid = await make_pipeline(tracker)
    dead = await tracker.create_task(new_task(works, "dead"))
    await tracker.fail(await claim(tracker, "worker"), "broken")
    waiting, running = await tracker.create_tasks([new_task(pid, "waiting"), new_task(pid, "run")])
    lease = await claim(tracker)
    assert lease.task.id == waiting
    await tracker.add_dependency(waiting, dead)  # leased: it loses its lease, as propagation does
    await tracker.add_dependency(running, dead)
    for task_id in (waiting, running):
        task = await tracker.get_task(task_id)
        assert task.dead_letter_reason == "upstream_dead_lettered"
        events = [e for e in await task_events(tracker, task_id) if e.kind == "dead_letter"]
        assert [e.data["upstream_task_id"] for e in events] == [dead]
    assert await tracker.claim("a", "coder", 60_000) is None
    with pytest.raises(LeaseLost):
        await tracker.heartbeat(lease)
