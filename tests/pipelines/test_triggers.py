"""A worker's cached definition and a newer version: a task in a stage the cache lacks (one
``pipeline apply`` added) has its pipeline read again, so the stage's own trigger is sent rather
than the built-in default (which the rail would refuse). A real SQLite rail."""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.api import Transition
from tests.pipelines.defs import sent, v1, with_edit
from tracker_client.errors import InvalidTransition
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from worker.config.models import RoleConfig
from worker.retry import RetryPolicy
from worker.triggers import PipelineBook, choose_again, choose_trigger

pytestmark = pytest.mark.anyio


async def test_a_stage_added_by_an_apply_is_read_again(tmp_path: Path) -> None:
    tracker = await open_tracker(f"sqlite:///{tmp_path / 'rail.db'}")
    try:
        pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
        assert pid is not None
        first = await tracker.create_task(TaskCreate(pipeline_id=pid, title="a"))
        book = PipelineBook()

        async def choose(task_id: str, role: str) -> str | None:
            choice = await choose_trigger(
                Transition(),
                RoleConfig(name=role, executor="command"),
                await tracker.get_task(task_id),
                tracker,
                book,
                policy=RetryPolicy(initial_s=0.01, max_s=0.02),
                budget_s=0.2,
            )
            return choice.trigger

        assert await choose(first, "writer") == "submit"  # version 1 is cached now
        await tracker.apply_pipeline("review", with_edit())
        lease = await tracker.claim("w", "writer", 60_000)
        assert lease is not None
        await tracker.transition(lease, "submit")  # into the new stage edit
        assert (await tracker.get_task(first)).stage == "edit"
        assert await choose(first, "editor") == "edited"  # not "complete"
    finally:
        await tracker.aclose()


async def test_a_refused_trigger_is_chosen_again_from_the_tasks_own_version(
    tmp_path: Path,
) -> None:
    """The other way round: a worker that read the newer version for a task still running
    under the older one. The rail refuses the newer trigger, naming the one it allows, which
    the worker then sends (the stage's only way out in the task's version)."""
    tracker = await open_tracker(f"sqlite:///{tmp_path / 'rail.db'}")
    try:
        pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
        assert pid is not None
        task_id = await tracker.create_task(TaskCreate(pipeline_id=pid, title="a"))
        lease = await tracker.claim("w", "writer", 60_000)
        assert lease is not None  # claimed under version 1
        await tracker.apply_pipeline("review", sent())
        book, role = PipelineBook(), RoleConfig(name="writer", executor="command")
        policy = RetryPolicy(initial_s=0.01, max_s=0.02)
        task = await tracker.get_task(task_id)
        first = await choose_trigger(
            Transition(), role, task, tracker, book, policy=policy, budget_s=0.2
        )
        assert first.trigger == "send"  # the current version's way out
        with pytest.raises(InvalidTransition) as refused:
            await tracker.transition(lease, "send")
        assert refused.value.allowed == ["submit"]
        again = await choose_again(
            first,
            refused.value.allowed,
            Transition(),
            role,
            task,
            tracker,
            book,
            policy=policy,
            budget_s=0.2,
        )
        assert again is not None and again.trigger == "submit"
        assert "task's version" in again.source
        # an executor's own trigger is never swapped
        named = await choose_again(
            first,
            ["submit"],
            Transition("send"),
            role,
            task,
            tracker,
            book,
            policy=policy,
            budget_s=0.2,
        )
        assert named is None
        await tracker.transition(lease, "submit")
        assert (await tracker.get_task(task_id)).stage == "review"
    finally:
        await tracker.aclose()
