"""A worker's cached definition and a newer version: a task in a stage the cache lacks (one
``pipeline apply`` added) has its pipeline read again, so the stage's own trigger is sent rather
than the built-in default (which the rail would refuse). A real SQLite rail."""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.api import Transition
from tests.pipelines.defs import v1, with_edit
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from worker.config.models import RoleConfig
from worker.retry import RetryPolicy
from worker.triggers import PipelineBook, choose_trigger

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
