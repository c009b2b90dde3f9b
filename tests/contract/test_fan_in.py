"""Fan-in (extension ``fan_in``): a transition's ``wait_for`` adds the dependency edges in the
transition's own write; the next stage is claimable only when every child is terminal; an
unknown id, the task itself or a cycle refuses the whole write (the lease and the task as they
were)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.support import claim, make_pipeline, new_task, simple_pipeline
from tracker_client.errors import Conflict, NotFound
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.requires("fan_in")]

UNKNOWN = "00000000-0000-4000-8000-0000000fa110"


def planner_pipeline() -> dict[str, Any]:
    """plan (planner) --split--> summarise (planner) --done--> done."""
    return {
        "initial": "plan",
        "states": {
            "plan": {"agent_role": "planner"},
            "summarise": {"agent_role": "planner"},
            "done": {"terminal": True},
        },
        "transitions": [
            {"from": "plan", "to": "summarise", "trigger": "split"},
            {"from": "summarise", "to": "done", "trigger": "done"},
        ],
    }


async def _setup(tracker: Tracker) -> tuple[str, str, list[str]]:
    plans = await make_pipeline(tracker, planner_pipeline())
    works = await make_pipeline(tracker, simple_pipeline("worker"))
    parent = await tracker.create_task(new_task(plans, "plan it"))
    children = await tracker.create_tasks([new_task(works, f"part {i}") for i in range(3)])
    return plans, parent, children


async def test_the_next_stage_waits_for_every_child(tracker: Tracker) -> None:
    _plans, parent, children = await _setup(tracker)
    lease = await claim(tracker, "planner")
    result = await tracker.transition(lease, "split", wait_for=[*children, children[0]])
    assert (result.previous_stage, result.new_stage) == ("plan", "summarise")
    deps = await tracker.list_dependencies(parent)
    assert [(d.depends_on_task_id, d.resolved) for d in deps] == [(c, False) for c in children]

    for _ in children[:2]:
        assert await tracker.claim("p", "planner", 60_000) is None
        await tracker.transition(await claim(tracker, "worker"), "complete")
    assert await tracker.claim("p", "planner", 60_000) is None  # one child still going
    await tracker.transition(await claim(tracker, "worker"), "complete")
    again = await claim(tracker, "planner")
    assert (again.task.id, again.task.stage) == (parent, "summarise")


async def test_an_edge_the_task_has_already_is_kept_once(tracker: Tracker) -> None:
    _plans, parent, children = await _setup(tracker)
    await tracker.add_dependency(parent, children[0])  # a dependency from before the claim
    await tracker.transition(await claim(tracker, "worker"), "complete")  # children[0] is done
    lease = await claim(tracker, "planner")
    await tracker.transition(lease, "split", wait_for=children[:2])
    deps = await tracker.list_dependencies(parent)
    assert [d.depends_on_task_id for d in deps] == children[:2]


async def _refused(tracker: Tracker, parent: str, wait_for: list[str], exc: Any) -> Any:
    lease = await claim(tracker, "planner")
    before = await tracker.get_task(parent)
    with pytest.raises(exc) as err:
        await tracker.transition(lease, "split", wait_for=wait_for)
    after = await tracker.get_task(parent)
    assert (after.stage, after.task_version) == (before.stage, before.task_version)
    assert after.latest_run is not None and after.latest_run.status == "running"
    return lease, err.value


async def test_an_unknown_id_refuses_the_whole_write_naming_it(tracker: Tracker) -> None:
    _plans, parent, children = await _setup(tracker)
    lease, err = await _refused(tracker, parent, [children[0], UNKNOWN], NotFound)
    assert UNKNOWN in str(err)
    assert await tracker.list_dependencies(parent) == []  # not even the known one
    await tracker.transition(lease, "split", wait_for=children)  # the lease was kept
    assert len(await tracker.list_dependencies(parent)) == 3


async def test_waiting_for_itself_is_a_cycle(tracker: Tracker) -> None:
    _plans, parent, _children = await _setup(tracker)
    _lease, err = await _refused(tracker, parent, [parent], Conflict)
    assert err.code == "dependency_cycle" and parent in str(err)
    assert await tracker.list_dependencies(parent) == []


async def test_a_cycle_through_wait_for_is_refused_naming_it(tracker: Tracker) -> None:
    plans, parent, children = await _setup(tracker)
    # a child that itself waits for the parent, through a middle task
    middle = await tracker.create_task(new_task(plans, "middle", dependencies=[parent]))
    await tracker.add_dependency(children[1], middle)
    _lease, err = await _refused(tracker, parent, [children[0], children[1]], Conflict)
    assert err.code == "dependency_cycle"
    assert f"{parent} -> {children[1]} -> {middle} -> {parent}" in str(err)
    assert await tracker.list_dependencies(parent) == []
