"""The trigger precedence of :func:`worker.triggers.choose_trigger`, on real pipelines of a real
SQLite rail; faults the rail cannot produce on demand (an unreadable pipeline) are injected."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from plugins.api import Transition
from tracker_client.errors import NotFound, TrackerUnavailable
from tracker_client.factory import open_tracker
from tracker_client.models import Pipeline, Task, TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig
from worker.retry import RetryPolicy
from worker.triggers import PipelineBook, PipelineWays, TriggerChoice, choose_trigger

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(initial_s=0.01, max_s=0.02)

NOTE = {
    "initial": "draft",
    "states": {"draft": {"agent_role": "writer"}, "done": {"terminal": True}},
    "transitions": [{"from": "draft", "to": "done", "trigger": "publish"}],
}
EDIT = {
    "initial": "edit",
    "states": {"edit": {"agent_role": "writer"}, "done": {"terminal": True}},
    "transitions": [
        {"from": "edit", "to": "done", "trigger": "approve"},
        {"from": "edit", "to": "done", "trigger": "complete"},
        {"from": "edit", "to": "done", "trigger": "drop"},
    ],
}


class CountingTracker:
    """The real tracker, counting ``get_pipeline`` calls, or failing them with ``fault``."""

    def __init__(self, inner: Tracker, fault: Exception | None = None) -> None:
        self.inner = inner
        self.fault = fault
        self.fetches = 0

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        self.fetches += 1
        if self.fault is not None:
            raise self.fault
        return await self.inner.get_pipeline(pipeline_id)


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


async def task_in(tracker: Tracker, name: str, definition: dict[str, Any]) -> Task:
    pipeline_id = await tracker.create_pipeline(name, definition)
    [task_id] = await tracker.create_tasks([TaskCreate(pipeline_id=pipeline_id, title="t")])
    return await tracker.get_task(task_id)


async def choose(
    tracker: Any,
    task: Task,
    outcome: Transition | None = None,
    book: PipelineBook | None = None,
    **role: Any,
) -> TriggerChoice:
    return await choose_trigger(
        outcome or Transition(),
        RoleConfig(name="writer", executor="command", **role),
        task,
        tracker,
        book or PipelineBook(),
        policy=FAST,
        budget_s=0.2,
    )


async def test_precedence_from_stage_override_down_to_complete(tracker: Tracker) -> None:
    edit = await task_in(tracker, "mag", EDIT)
    note = await task_in(tracker, "note", NOTE)
    both = {"mag.edit": "approve", "mag": "drop"}
    assert (await choose(tracker, edit, triggers=both)).trigger == "approve"
    picked = await choose(tracker, edit, triggers={"mag": "drop"})
    assert (picked.trigger, picked.source) == ("drop", "pipeline override 'mag' of role writer")
    # an override beats the stage's only way out (explicit configuration wins)
    assert (await choose(tracker, note, triggers={"note": "x"})).trigger == "x"
    only = await choose(tracker, note, default_trigger="submit")
    assert (only.trigger, only.source) == ("publish", "the only way out of the stage")
    default = await choose(tracker, edit, default_trigger="drop")
    assert (default.trigger, default.source) == ("drop", "role writer's default_trigger")
    fallback = await choose(tracker, edit)
    assert (fallback.trigger, fallback.allowed) == ("complete", ("approve", "complete", "drop"))
    # a key of another pipeline or stage does not apply
    assert (await choose(tracker, note, triggers={"mag": "x", "note.edit": "y"})).trigger == (
        "publish"
    )


async def test_the_executor_trigger_always_wins(tracker: Tracker) -> None:
    note = await task_in(tracker, "note", NOTE)
    outcome = Transition("reject", source="exit code 3 of command 'x'")
    choice = await choose(tracker, note, outcome, triggers={"note": "publish"})
    assert (choice.trigger, choice.source, choice.pipeline) == (
        "reject",
        "exit code 3 of command 'x'",
        "note",
    )
    plain = await choose(tracker, note, Transition("reject"))
    assert plain.source == "the command executor of role writer"


async def test_a_pipeline_is_fetched_once_per_book(tracker: Tracker) -> None:
    counting = CountingTracker(tracker)
    book = PipelineBook()
    note = await task_in(tracker, "note", NOTE)
    edit = await task_in(tracker, "mag", EDIT)
    for _ in range(5):
        assert (await choose(counting, note, book=book)).trigger == "publish"
        assert (await choose(counting, edit, book=book)).trigger == "complete"
    assert counting.fetches == 2


async def test_an_unreadable_pipeline_leaves_the_default(
    tracker: Tracker, caplog: pytest.LogCaptureFixture
) -> None:
    note = await task_in(tracker, "note", NOTE)
    broken = CountingTracker(tracker, NotFound("gone"))
    with caplog.at_level(logging.WARNING, logger="backlog_worker.worker"):
        choice = await choose(broken, note, default_trigger="publish")
    assert (choice.trigger, choice.source) == ("publish", "role writer's default_trigger")
    assert "cannot be read" in caplog.text
    assert (await choose(broken, note)).trigger == "complete"
    # an explicit trigger needs no definition; the error would only lack the pipeline's name
    explicit = await choose(broken, note, Transition("publish"))
    assert (explicit.trigger, explicit.pipeline) == ("publish", None)


def test_a_repeated_trigger_is_one_way_out() -> None:
    # NullTickets accepts a repeated (from, trigger) pair (the first wins); the embedded rail
    # refuses one, so the definition is read directly.
    definition = {
        "transitions": [
            {"from": "draft", "to": "done", "trigger": "publish"},
            {"from": "draft", "to": "gone", "trigger": "publish"},
            {"from": "done", "to": "draft", "trigger": "reopen"},
        ]
    }
    ways = PipelineWays.of("p1", "note", definition).ways
    assert ways == {"draft": ("publish",), "done": ("reopen",)}


async def test_an_unreachable_tracker_is_not_papered_over(tracker: Tracker) -> None:
    note = await task_in(tracker, "note", NOTE)
    down = CountingTracker(tracker, TrackerUnavailable("down"))
    with pytest.raises(TrackerUnavailable):
        await choose(down, note)
    assert (await choose(down, note, Transition("publish"))).trigger == "publish"


async def test_a_choice_is_kept_per_stage_and_role_until_the_pipeline_is_read_again(
    tracker: Tracker,
) -> None:
    book = PipelineBook()
    edit = await task_in(tracker, "mag", EDIT)
    role = RoleConfig(name="writer", executor="command", default_trigger="drop")
    assert book.choice(Transition(), role, edit) is None  # nothing chosen yet
    first = await choose_trigger(Transition(), role, edit, tracker, book, policy=FAST, budget_s=0.2)
    assert first.trigger == "drop" and book.choice(Transition(), role, edit) is first
    # An outcome naming its trigger, or another role's config, chooses for itself.
    assert book.choice(Transition("approve"), role, edit) is None
    other = RoleConfig(name="writer", executor="command", default_trigger="approve")
    assert book.choice(Transition(), other, edit) is None
    # A definition read again (pipeline apply, a refused trigger) chooses again.
    book.forget(edit.pipeline_id)
    assert book.choice(Transition(), role, edit) is None


async def test_no_choice_is_kept_for_a_stage_the_definition_lacks(tracker: Tracker) -> None:
    book = PipelineBook()
    edit = await task_in(tracker, "mag", EDIT)
    moved = edit.model_copy(update={"stage": "added-later"})
    role = RoleConfig(name="writer", executor="command")
    choice = await choose_trigger(
        Transition(), role, moved, tracker, book, policy=FAST, budget_s=0.2
    )
    assert choice.trigger == "complete"
    assert book.choice(Transition(), role, moved) is None  # the next run reads it again
