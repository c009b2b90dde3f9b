"""Agents on a rail without the agent extensions, as a plain NullTickets server is: the same
executor code, the worker taking the plain way for each call (``tracker_client.agents``).

The rail is a real embedded tracker whose ``capabilities()`` leaves out ``subtasks``,
``fan_in``, ``upstream`` and ``checkpoints`` (what a plain NullTickets server declares of them:
nothing), so each agent call goes the way it goes there: the child's parent in
``metadata.parent_id``, the dependency edges added one by one before the transition,
checkpoints in the KV store (namespace ``backlog_worker.checkpoints``), the upstream composed
from plain reads. In-process Worker, drained.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext, Outcome, Transition
from tracker_client.agent_models import CHECKPOINT_NAMESPACE
from tracker_client.capabilities import Capabilities
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

AGENT_EXTENSIONS = {"subtasks", "fan_in", "upstream", "checkpoints", "human_steps"}
PLAN = {
    "initial": "plan",
    "states": {
        "plan": {"agent_role": "planner"},
        "gather": {"agent_role": "summariser"},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "plan", "to": "gather", "trigger": "split"},
        {"from": "gather", "to": "done", "trigger": "summarised"},
    ],
}
RESEARCH = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "researcher"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


@pytest.fixture
async def tracker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    caps = await t.capabilities()
    plain = dataclasses.replace(caps, extensions=frozenset(caps.extensions - AGENT_EXTENSIONS))

    async def capabilities() -> Capabilities:
        return plain

    monkeypatch.setattr(t, "capabilities", capabilities)
    try:
        yield t
    finally:
        await t.aclose()


class Agents:
    """The planner, researcher and summariser roles, recording what their runs saw."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    async def plan(self, ctx: ExecutionContext) -> Outcome:
        if ctx.attempt == 1:
            await ctx.checkpoint({"attempt": 1})
            raise RuntimeError("the first attempt fails after checkpointing")
        self.seen["previous"] = ctx.previous_checkpoint
        await ctx.store.put("memory", "topic", "tides")
        ids = [await ctx.spawn("research", f"part {i}", metadata={"i": i}) for i in (1, 2)]
        return Transition("split", wait_for=ids)

    async def research(self, ctx: ExecutionContext) -> Outcome:
        topic = await ctx.store.get("memory", "topic")
        await ctx.report("result", {"i": ctx.task.metadata["i"], "topic": topic}, flush=True)
        return Transition("complete")

    async def summarise(self, ctx: ExecutionContext) -> Outcome:
        self.seen["upstream"] = sorted((u.outcome, u.result["i"]) for u in ctx.upstream)
        return Transition("summarised")


class _Call:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        result: Outcome = await self.fn(ctx)
        return result


async def test_fan_in_store_and_checkpoints_the_plain_way(tracker: Tracker, tmp_path: Path) -> None:
    plan_id = await tracker.create_pipeline("plan", PLAN)
    await tracker.create_pipeline("research", RESEARCH)
    parent = await tracker.create_task(
        TaskCreate(
            pipeline_id=plan_id,
            title="tides",
            retry_policy=RetryPolicy(max_attempts=2, retry_delay_ms=50),
        )
    )
    agents = Agents()
    roles = [
        Role(RoleConfig(name="planner", executor="python"), _Call(agents.plan)),
        Role(RoleConfig(name="researcher", executor="python"), _Call(agents.research)),
        Role(RoleConfig(name="summariser", executor="python"), _Call(agents.summarise)),
    ]
    config = WorkerConfig(
        agent_id="w1",
        concurrency=2,
        lease_ttl_s=3.0,
        idle_min_s=0.01,
        idle_max_s=0.1,
        report_flush_s=0.05,
        workdir=tmp_path / "runs",
        drain=True,
    )
    with anyio.fail_after(45):
        await Worker(tracker, config, roles).run()
    assert (await tracker.get_task(parent)).stage == "done"
    # the checkpoint went to the KV store, and the retry read it from there
    assert agents.seen["previous"] == {"attempt": 1}
    entry = await tracker.store_get(CHECKPOINT_NAMESPACE, parent)
    assert entry.value["data"] == {"attempt": 1}
    # the children carry their parent in metadata, not in parent_id
    deps = await tracker.list_dependencies(parent)
    assert len(deps) == 2 and all(d.resolved for d in deps)
    for dep in deps:
        child = await tracker.get_task(dep.depends_on_task_id)
        assert child.parent_id is None and child.metadata["parent_id"] == parent
    # the upstream, composed from plain reads: each child's result
    assert agents.seen["upstream"] == [("done", 1), ("done", 2)]
