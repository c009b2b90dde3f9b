"""``apply_pipeline`` / ``diff_pipeline`` on every rail (embedded, PostgreSQL, served over ASGI and
real HTTP): versions, waiting tasks following a new version, running tasks finishing under the
version they were claimed with, moves in one transaction, and each refusal naming what is wrong.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.support import FakeClock
from tests.pipelines.defs import renamed, v1, with_edit
from tracker_client.errors import Conflict, ValidationFailed
from tracker_client.models import Lease, TaskCreate
from tracker_client.protocol import RailParts, Tracker

pytestmark = pytest.mark.anyio

TTL = 60_000


async def _task(tracker: Tracker, pid: str, title: str = "t", **more: Any) -> str:
    return await tracker.create_task(TaskCreate(pipeline_id=pid, title=title, **more))


async def _claim(tracker: Tracker, role: str) -> Lease:
    lease = await tracker.claim("agent-1", role, TTL)
    assert lease is not None, f"no task of role {role!r} to claim"
    return lease


async def _stage(tracker: Tracker, task_id: str) -> str:
    return (await tracker.get_task(task_id)).stage


async def test_the_capability_is_declared_as_a_part(tracker: Tracker) -> None:
    parts = RailParts.declared(tracker, await tracker.capabilities())
    assert parts.pipelines is tracker


async def test_apply_creates_then_the_same_file_again_is_unchanged(tracker: Tracker) -> None:
    created = await tracker.apply_pipeline("review", v1())
    assert (created.created, created.applied, created.version) == (True, True, 1)
    assert created.pipeline_id is not None
    again = await tracker.apply_pipeline("review", v1())
    assert (again.unchanged, again.applied, again.version) == (True, False, 1)
    assert again.pipeline_id == created.pipeline_id
    # key order does not count
    reordered = dict(reversed(list(v1().items())))
    assert (await tracker.apply_pipeline("review", reordered)).unchanged
    assert [p.name for p in await tracker.list_pipelines()] == ["review"]


async def test_an_added_stage_reaches_waiting_tasks(tracker: Tracker) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    waiting = [await _task(tracker, pid, f"w{i}") for i in range(3)]
    plan = await tracker.apply_pipeline("review", with_edit())
    assert (plan.applied, plan.from_version, plan.version) == (True, 1, 2)
    assert plan.stages_added == ["edit"]
    assert "draft:submit:edit" in plan.transitions_added
    assert "draft:submit:review" in plan.transitions_removed
    assert plan.tasks_updated == 3 and plan.tasks_running == 0
    # a task that waited under version 1 now follows version 2: submit leads to the new stage
    lease = await _claim(tracker, "writer")
    assert lease.task_id in waiting
    moved = await tracker.transition(lease, "submit")
    assert moved.new_stage == "edit"
    editing = await _claim(tracker, "editor")
    assert editing.task_id == lease.task_id
    assert (await tracker.transition(editing, "edited")).new_stage == "review"
    # a new task enters under version 2 too
    fresh = await _task(tracker, pid, "new")
    assert await _stage(tracker, fresh) == "draft"


async def test_a_changed_role_applies_to_waiting_tasks(tracker: Tracker) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    task = await _task(tracker, pid)
    authored = v1()
    authored["states"]["draft"] = {"agent_role": "author"}
    plan = await tracker.apply_pipeline("review", authored)
    assert plan.stages_changed == ["draft: agent_role 'writer' -> 'author'"]
    assert await tracker.claim("agent-1", "writer", TTL) is None
    assert (await _claim(tracker, "author")).task_id == task


async def test_rename_with_moves_while_a_task_runs_under_version_1(tracker: Tracker) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    in_review = await _task(tracker, pid, "in review")
    first = await _claim(tracker, "writer")
    await tracker.transition(first, "submit")  # now waiting in review
    assert first.task_id == in_review
    running = await _task(tracker, pid, "running")
    held = await _claim(tracker, "writer")  # claimed under version 1, in draft
    assert held.task_id == running

    refused = await _refused(tracker, "review", renamed())
    assert "stage 'review' holds 1 task(s)" in refused and "moves" in refused
    plan = await tracker.diff_pipeline("review", renamed(), {"review": "check"})
    assert (plan.applied, plan.tasks_moving, plan.tasks_running) == (False, {"review": 1}, 1)
    assert await _stage(tracker, in_review) == "review"  # the diff wrote nothing

    applied = await tracker.apply_pipeline("review", renamed(), {"review": "check"})
    assert (applied.applied, applied.version, applied.moves) == (True, 2, {"review": "check"})
    assert await _stage(tracker, in_review) == "check"  # moved in the apply's transaction
    # the held task finishes under version 1 (submit leads to review there), then lands in
    # version 2 through the move: check
    landed = await tracker.transition(held, "submit")
    assert (landed.previous_stage, landed.new_stage) == ("draft", "check")
    assert await _stage(tracker, running) == "check"
    # both are claimable in the renamed stage and finish under version 2
    for _ in range(2):
        lease = await _claim(tracker, "reviewer")
        assert (await tracker.transition(lease, "approve")).new_stage == "done"
    # the file applied again (moves and all) is unchanged
    assert (await tracker.apply_pipeline("review", renamed(), {"review": "check"})).unchanged


async def test_a_task_running_in_a_renamed_stage_finishes_under_its_version(
    tracker: Tracker,
) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    task = await _task(tracker, pid)
    await tracker.transition(await _claim(tracker, "writer"), "submit")
    held = await _claim(tracker, "reviewer")  # running in review, under version 1
    await tracker.apply_pipeline("review", renamed(), {"review": "check"})
    assert await _stage(tracker, task) == "review"  # a running task is not moved under it
    ways = (await tracker.get_task(task)).available_transitions  # its own version's
    assert [(w.trigger, w.to) for w in ways] == [("approve", "done")]
    done = await tracker.transition(held, "approve")  # judged by version 1: review -> done
    assert (done.previous_stage, done.new_stage) == ("review", "done")


async def test_a_running_task_failing_is_brought_forward_by_maintenance(
    tracker: Tracker,
) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    task = await _task(tracker, pid, retry_policy={"max_attempts": 5, "retry_delay_ms": 0})
    await tracker.transition(await _claim(tracker, "writer"), "submit")
    held = await _claim(tracker, "reviewer")
    await tracker.apply_pipeline("review", renamed(), {"review": "check"})
    result = await tracker.fail(held, "flaky")
    assert result.retry_scheduled
    await tracker.maintenance()
    assert await _stage(tracker, task) == "check"
    again = await _claim(tracker, "reviewer")
    assert (await tracker.transition(again, "approve")).new_stage == "done"


async def test_a_task_dead_lettered_under_its_version_is_requeued_into_the_renamed_stage(
    tracker: Tracker,
) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    task = await _task(tracker, pid, retry_policy={"max_attempts": 1})
    await tracker.transition(await _claim(tracker, "writer"), "submit")
    held = await _claim(tracker, "reviewer")
    await tracker.apply_pipeline("review", renamed(), {"review": "check"})
    assert (await tracker.fail(held, "broken")).dead_lettered
    assert await _stage(tracker, task) == "review"  # dead-lettered where it ran, under v1
    requeued = await tracker.requeue(task)  # back where it was: the renamed stage
    assert requeued.stage == "check"
    again = await _claim(tracker, "reviewer")
    assert (await tracker.transition(again, "approve")).new_stage == "done"


async def test_removing_a_stage_that_holds_tasks_is_refused_without_moves(
    tracker: Tracker,
) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    for i in range(2):
        await _task(tracker, pid, f"t{i}")
        await tracker.transition(await _claim(tracker, "writer"), "submit")
    message = await _refused(tracker, "review", renamed())
    assert message.startswith("pipeline 'review' (version 1): the new definition would strand")
    assert "stage 'review' holds 2 task(s) (2 unfinished, 0 running)" in message
    assert 'moves = { review = "<new stage>" }' in message
    # nothing changed
    assert (await tracker.apply_pipeline("review", v1())).unchanged
    assert (await tracker.get_pipeline(pid)).definition == v1()


async def test_removing_where_a_running_task_may_land_is_refused(tracker: Tracker) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    await _task(tracker, pid)
    await _claim(tracker, "writer")  # running in draft; its submit leads to review
    message = await _refused(tracker, "review", renamed())
    assert "stage 'review' is where 1 running task(s) may move when their run ends" in message


async def test_a_stage_holding_tasks_may_not_turn_terminal(tracker: Tracker) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    await _task(tracker, pid)
    ended = v1()
    ended["states"]["draft"] = {"terminal": True}
    ended["initial"] = "review"
    ended["transitions"] = [t for t in ended["transitions"] if t["from"] != "draft"]
    message = await _refused(tracker, "review", ended)
    assert "stage 'draft' holds 1 task(s) and would turn from working to terminal" in message


async def test_retry_settings_reach_waiting_tasks_but_not_their_own(
    tracker: Tracker, clock: FakeClock
) -> None:
    three = {**v1(), "retry": {"max_attempts": 3, "retry_delay_ms": 0}}
    pid = (await tracker.apply_pipeline("review", three)).pipeline_id
    assert pid is not None
    inherits = await _task(tracker, pid, "inherits")
    own = await _task(tracker, pid, "own", retry_policy={"max_attempts": 7})
    one = {**v1(), "retry": {"max_attempts": 1, "retry_delay_ms": 0}}
    plan = await tracker.apply_pipeline("review", one)
    assert plan.settings_changed == [
        "retry: {'max_attempts': 3, 'retry_delay_ms': 0} -> "
        "{'max_attempts': 1, 'retry_delay_ms': 0}"
    ]
    outcomes = {}
    for _ in range(2):
        lease = await _claim(tracker, "writer")
        outcomes[lease.task_id] = await tracker.fail(lease, "boom")
    assert outcomes[inherits].dead_lettered  # the pipeline's new max_attempts: 1
    assert outcomes[own].retry_scheduled  # its own 7 is kept


async def test_diff_shows_the_changes_and_writes_nothing(tracker: Tracker) -> None:
    new = await tracker.diff_pipeline("review", v1())
    assert (new.created, new.applied, new.pipeline_id) == (True, False, None)
    assert await tracker.list_pipelines() == []
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    await _task(tracker, pid)
    plan = await tracker.diff_pipeline("review", with_edit())
    assert (plan.from_version, plan.version, plan.applied) == (1, 2, False)
    assert plan.stages_added == ["edit"]
    assert plan.transitions_added == [
        "draft:submit:edit",
        "edit:edited:review",
        "review:reject:draft",
    ]
    assert plan.transitions_removed == ["draft:submit:review"]
    assert plan.tasks_updated == 1
    assert "stage added: edit" in plan.changes()
    assert (await tracker.apply_pipeline("review", v1())).unchanged  # still version 1


@pytest.mark.parametrize(
    ("definition", "moves", "named"),
    [
        (renamed(), {"reveiw": "check"}, "'moves': 'reveiw' is not a stage of pipeline 'review'"),
        (
            renamed(),
            {"review": "chek"},
            "'moves': review -> chek: 'chek' is not a stage of the new",
        ),
        (v1(), {"draft": "done"}, "'moves': stage 'draft' is still in the new definition"),
        (renamed(), {"review": ""}, "each move maps a stage name to a stage name"),
        ({**v1(), "initial": "nowhere"}, None, "'initial' state 'nowhere' is not defined"),
        ({**v1(), "stages": {}}, None, "unknown key 'stages' (did you mean 'states'?)"),
    ],
    ids=[
        "unknown-stage",
        "target-not-in-new",
        "kept-stage",
        "empty-target",
        "bad-initial",
        "misspelt-key",
    ],
)
async def test_each_bad_input_is_named_and_changes_nothing(
    tracker: Tracker, definition: dict[str, Any], moves: dict[str, str] | None, named: str
) -> None:
    pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
    assert pid is not None
    for call in (tracker.diff_pipeline, tracker.apply_pipeline):
        with pytest.raises(ValidationFailed) as caught:
            await call("review", definition, moves)
        assert named in str(caught.value)
    assert (await tracker.get_pipeline(pid)).definition == v1()


async def _refused(tracker: Tracker, name: str, definition: dict[str, Any]) -> str:
    """The refusal of applying ``definition`` (the diff is refused the same way)."""
    with pytest.raises(Conflict) as by_diff:
        await tracker.diff_pipeline(name, definition)
    with pytest.raises(Conflict) as caught:
        await tracker.apply_pipeline(name, definition)
    assert caught.value.code == "stage_holds_tasks"
    assert str(by_diff.value) == str(caught.value)
    return str(caught.value)


async def test_the_operations_answer_by_name_through_call(tracker: Tracker) -> None:
    """``Tracker.call`` by the contract's names: a body field called ``name`` is no clash."""
    plan = await tracker.call("diff_pipeline", name="review", definition=v1())
    assert plan.created and not plan.applied
    done = await tracker.call("apply_pipeline", name="review", definition=v1(), moves=None)
    assert (done.created, done.applied) == (True, True)
