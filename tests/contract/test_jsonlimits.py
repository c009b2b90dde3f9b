"""JSON depth limits on every write path: a value nested past 64 levels is refused at write time.

Stored, such a value broke every later read (pydantic's serialisation depth: list endpoints
answered 500 forever; ``json.loads`` crashes near 1,000 levels). Each case writes a too-deep
value through one write path, expects ``ValidationFailed`` naming the limit, and checks that
nothing was written and the rail's reads still answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.contract.support import (
    all_tasks,
    claim,
    make_pipeline,
    new_task,
    run_events,
    simple_pipeline,
)
from tracker_client.errors import ValidationFailed
from tracker_client.jsonlimits import MAX_JSON_DEPTH
from tracker_client.models import ArtifactCreate
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


def nested(depth: int) -> Any:
    """``depth`` levels of alternating objects and arrays around an integer, an object outside."""
    value: Any = 1
    for i in range(depth):
        # the outermost level is an object (metadata must be one)
        value = {"k": value} if (depth - 1 - i) % 2 == 0 else [value]
    return value


Write = Callable[[Tracker, Any], Awaitable[Any]]


async def _metadata(tracker: Tracker, deep: Any) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid, metadata=deep))


async def _bulk_metadata(tracker: Tracker, deep: Any) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, "ok"), new_task(pid, "deep", metadata=deep)])


async def _definition(tracker: Tracker, deep: Any) -> None:
    definition = simple_pipeline()
    definition["states"]["todo"]["notes"] = deep
    await tracker.create_pipeline("deep", definition)


async def _event(tracker: Tracker, deep: Any) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    await tracker.add_event(await claim(tracker), "log", deep)


async def _artifact(tracker: Tracker, deep: Any) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    await tracker.add_artifact(ArtifactCreate(kind="file", uri="file:///x", task_id=tid, meta=deep))


async def _store(tracker: Tracker, deep: Any) -> None:
    await tracker.store_put("ns", "k", deep)


async def _transition_usage(tracker: Tracker, deep: Any) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    await tracker.transition(await claim(tracker), "complete", usage=deep)


async def _fail_usage(tracker: Tracker, deep: Any) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    await tracker.fail(await claim(tracker), "boom", usage=deep)


WRITES: dict[str, Write] = {
    "task-metadata": _metadata,
    "bulk-metadata": _bulk_metadata,
    "pipeline-definition": _definition,
    "event-data": _event,
    "artifact-meta": _artifact,
    "store-value": _store,
    "transition-usage": _transition_usage,
    "fail-usage": _fail_usage,
}


async def _reads_answer(tracker: Tracker) -> None:
    """Every list read still answers, and nothing deep was stored."""
    tasks = await all_tasks(tracker)
    assert all(t.title != "deep" for t in tasks)
    assert [p.name for p in await tracker.list_pipelines() if p.name == "deep"] == []
    assert await tracker.store_list("ns") == []
    for task in tasks:
        detail = await tracker.get_task(task.id)
        assert (await tracker.list_artifacts(task_id=task.id)).items == []
        if detail.latest_run is not None:
            assert await run_events(tracker, detail.latest_run.id) == []
            assert detail.latest_run.status == "running"  # transition/fail wrote nothing


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 256])
@pytest.mark.parametrize("path", list(WRITES))
async def test_too_deep_is_refused_naming_the_limit(
    tracker: Tracker, path: str, depth: int
) -> None:
    with pytest.raises(ValidationFailed) as err:
        await WRITES[path](tracker, nested(depth))
    assert f"limit {MAX_JSON_DEPTH}" in str(err.value)
    await _reads_answer(tracker)


# A definition has no free-form key left to nest in (unknown keys are refused): the depth check
# runs first, so a too-deep one is still refused naming the limit, above.
@pytest.mark.parametrize("path", [p for p in WRITES if p != "pipeline-definition"])
async def test_depth_at_the_limit_is_stored(tracker: Tracker, path: str) -> None:
    # The limit counts containers: a value MAX_JSON_DEPTH levels deep is fine.
    await WRITES[path](tracker, nested(MAX_JSON_DEPTH))
    # Every read of what was written answers (these answered 500 past pydantic's depth).
    pipelines = await tracker.list_pipelines()
    entries = await tracker.store_list("ns")
    for task in await all_tasks(tracker):
        detail = await tracker.get_task(task.id)
        await tracker.list_artifacts(task_id=task.id)
        if detail.latest_run is not None:
            await run_events(tracker, detail.latest_run.id)
    assert pipelines or entries
