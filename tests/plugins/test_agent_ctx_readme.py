"""The agents page's example (docs/executors/agents.md) runs as written, through the harness."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.api import Transition
from plugins.testing import ExecutorHarness
from tests.docs.blocks import find
from tracker_client.agent_models import Upstream

pytestmark = pytest.mark.anyio

PAGE = "docs/executors/agents.md"


def _example() -> dict[str, Any]:
    code = find(PAGE, lang="python").body
    namespace: dict[str, Any] = {}
    exec(compile(code, PAGE, "exec"), namespace)
    return namespace


class _Fn:
    """The README's function as an executor (what the python executor calls)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    async def execute(self, ctx: Any) -> Any:
        return await self.fn(ctx)


async def test_the_readme_planner_spawns_waits_and_resumes() -> None:
    plan = _Fn(_example()["plan"])
    harness = ExecutorHarness(
        title="tides", store={"agents": {"old": "tides of March"}}, pipelines=["research"]
    )
    outcome = await harness.run(plan)
    ids = ("subtask-1", "subtask-2", "subtask-3")
    assert outcome == Transition("split", wait_for=ids)
    assert harness.sink.checkpoints == [{"spawned": list(ids)}]
    brief = harness.sink.store["agents"][f"brief-{harness.task.id}"]
    assert brief == {"topic": "tides", "known": ["old"]}
    # a retried attempt reuses the checkpointed ids: nothing spawned again
    retry = ExecutorHarness(
        attempt=2, previous_checkpoint={"spawned": list(ids)}, pipelines=["research"]
    )
    assert await retry.run(plan) == Transition("split", wait_for=ids)
    assert retry.sink.spawned == []


async def test_the_readme_summariser_reads_upstream() -> None:
    ups = [
        Upstream(task_id=f"t{i}", title="p", stage="done", outcome="done", result={"i": i})
        for i in (1, 2)
    ]
    harness = ExecutorHarness(upstream=ups)
    assert await harness.run(_Fn(_example()["summarise"])) == Transition("summarised")
    assert harness.events_of("result") == [{"parts": [{"i": 1}, {"i": 2}]}]
