"""One role, several pipelines: the trigger per pipeline and stage, in a real worker.

The worker is built the way ``backlog-worker run`` builds it (a TOML file through
:func:`load_config`, executors from the plugin registry) and runs ``command`` executors with an
exit-code mapping on a real SQLite rail.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from tracker_client.protocol import Tracker
from worker.cli.run import build_roles
from worker.config.models import load_config
from worker.daemon import Worker

pytestmark = pytest.mark.anyio

#: draft -> edit (one way out: submit), edit -> done/draft/dropped (three ways out).
ARTICLE = {
    "initial": "draft",
    "states": {
        "draft": {"agent_role": "writer"},
        "edit": {"agent_role": "writer"},
        "done": {"terminal": True},
        "dropped": {"terminal": True},
    },
    "transitions": [
        {"from": "draft", "to": "edit", "trigger": "submit"},
        {"from": "edit", "to": "done", "trigger": "approve"},
        {"from": "edit", "to": "draft", "trigger": "reject"},
        {"from": "edit", "to": "dropped", "trigger": "drop"},
    ],
}
#: draft -> done on another trigger.
NOTE = {
    "initial": "draft",
    "states": {"draft": {"agent_role": "writer"}, "done": {"terminal": True}},
    "transitions": [{"from": "draft", "to": "done", "trigger": "publish"}],
}
#: review with two ways out.
REVIEW = {
    "initial": "review",
    "states": {
        "review": {"agent_role": "writer"},
        "done": {"terminal": True},
        "todo": {"terminal": True},
    },
    "transitions": [
        {"from": "review", "to": "done", "trigger": "approve"},
        {"from": "review", "to": "todo", "trigger": "reject"},
    ],
}
#: The command exits with the task's ``metadata.code``.
EXIT_WITH = "import sys; sys.exit(int(sys.argv[1]))"


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


def write_config(tmp_path: Path, role_extra: str = "") -> Path:
    argv = json.dumps([sys.executable, "-c", EXIT_WITH, "{task.metadata[code]}"])
    path = tmp_path / "worker.toml"
    path.write_text(
        f"""
[worker]
agent_id = "w1"
concurrency = 2
lease_ttl_s = 5.0
idle_min_s = 0.01
idle_max_s = 0.1
maintenance_interval_s = 0.5
report_flush_s = 0.05
drain = true
workdir = {json.dumps(str(tmp_path / "runs"))}

[[roles]]
name = "writer"
executor = "command"
{role_extra}
[roles.options]
argv = {argv}
exit_codes = {{ "0" = "", "5" = "drop" }}
"""
    )
    return path


async def drain(tracker: Tracker, config_path: Path) -> Worker:
    config = load_config(config_path)
    worker = Worker(tracker, config.worker, build_roles(config))
    with anyio.fail_after(40):
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: worker.run(task_status=task_status))
    return worker


async def add(tracker: Tracker, pipeline_id: str, code: int, **kw: Any) -> str:
    [task_id] = await tracker.create_tasks(
        [TaskCreate(pipeline_id=pipeline_id, title=f"exit {code}", metadata={"code": code}, **kw)]
    )
    return task_id


async def triggers_of(tracker: Tracker, task_id: str) -> list[str]:
    events = (await tracker.list_task_events(task_id, limit=1000, kind="transition")).items
    return [e.data["trigger"] for e in events]


@pytest.mark.timeout(60)
async def test_two_pipelines_share_a_role_with_different_triggers(
    tracker: Tracker, tmp_path: Path
) -> None:
    # The unquoted dotted key is the TOML table {article = {edit = ...}}: read as "article.edit".
    path = write_config(tmp_path, '[roles.triggers]\narticle.edit = "approve"\n')
    article = await tracker.create_pipeline("article", ARTICLE)
    note = await tracker.create_pipeline("note", NOTE)
    article_task = await add(tracker, article, 0)
    note_task = await add(tracker, note, 0)

    worker = await drain(tracker, path)

    assert (await tracker.get_task(article_task)).stage == "done"
    assert (await tracker.get_task(note_task)).stage == "done"
    # draft's only way out, then the pipeline override for edit's three ways out
    assert await triggers_of(tracker, article_task) == ["submit", "approve"]
    assert await triggers_of(tracker, note_task) == ["publish"]  # the only way out of note's draft
    assert worker.stats.failed == 0


@pytest.mark.timeout(60)
async def test_an_exit_code_trigger_wins_and_a_refusal_names_its_source(
    tracker: Tracker, tmp_path: Path
) -> None:
    path = write_config(tmp_path)
    article = await tracker.create_pipeline("article", ARTICLE)
    task_id = await add(tracker, article, 5, retry_policy={"max_attempts": 3})

    await drain(tracker, path)

    detail = await tracker.get_task(task_id)
    assert detail.dead_letter_reason is not None  # not retried: the same exit would fail again
    assert detail.latest_run is not None and detail.latest_run.error is not None
    error = detail.latest_run.error
    assert "trigger 'drop' (exit code 5 of command " in error
    assert "not allowed from stage 'draft' of pipeline 'article'" in error
    assert error.endswith("allowed triggers: submit")
    assert len(await tracker.list_runs(task_id)) == 1


@pytest.mark.timeout(60)
async def test_two_ways_out_and_no_mapping_fails_naming_the_choices_and_the_source(
    tracker: Tracker, tmp_path: Path
) -> None:
    path = write_config(tmp_path)
    review = await tracker.create_pipeline("rev", REVIEW)
    task_id = await add(tracker, review, 0, retry_policy={"max_attempts": 3})

    await drain(tracker, path)

    detail = await tracker.get_task(task_id)
    assert detail.dead_letter_reason is not None
    assert detail.latest_run is not None and detail.latest_run.error is not None
    error = detail.latest_run.error
    assert error.startswith("invalid_trigger: no trigger for stage 'review' of pipeline 'rev'")
    assert "exit code 0 of command " in error and "names no trigger" in error
    assert "2 ways out (approve, reject)" in error
    assert '[roles.triggers] ("rev.review" = "approve")' in error
    events = (await tracker.list_task_events(task_id, limit=100, kind="error")).items
    assert events[-1].data["allowed"] == ["approve", "reject"]
    assert "exit code 0 of command" in events[-1].data["source"]
    assert await triggers_of(tracker, task_id) == []


@pytest.mark.timeout(60)
async def test_a_refused_default_trigger_says_it_is_the_roles(
    tracker: Tracker, tmp_path: Path
) -> None:
    path = write_config(tmp_path, 'default_trigger = "submit"\n')
    review = await tracker.create_pipeline("rev", REVIEW)
    note = await tracker.create_pipeline("note", NOTE)
    review_task = await add(tracker, review, 0, retry_policy={"max_attempts": 1})
    note_task = await add(tracker, note, 0)

    await drain(tracker, path)

    detail = await tracker.get_task(review_task)
    assert detail.latest_run is not None and detail.latest_run.error is not None
    assert detail.latest_run.error == (
        "invalid_trigger: trigger 'submit' (role writer's default_trigger) is not allowed from "
        "stage 'review' of pipeline 'rev'; allowed triggers: approve, reject"
    )
    # where the stage has one way out, that one is taken, whatever default_trigger says
    assert await triggers_of(tracker, note_task) == ["publish"]
