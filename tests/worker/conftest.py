"""Fixtures for worker tests: a real embedded tracker on a temp file and helpers to drive it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext, Outcome, Transition
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

PIPELINE = {
    "initial": "todo",
    "states": {
        "todo": {"agent_role": "coder"},
        "review": {"agent_role": "reviewer"},
        "done": {"terminal": True},
        "dead": {"terminal": True},
    },
    "transitions": [
        {"from": "todo", "to": "review", "trigger": "complete"},
        {"from": "review", "to": "done", "trigger": "approve"},
        {"from": "review", "to": "todo", "trigger": "reject", "instructions": "try again"},
    ],
}


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


@pytest.fixture
async def pipeline_id(tracker: Tracker) -> str:
    return await tracker.create_pipeline("flow", PIPELINE)


async def add_tasks(tracker: Tracker, pipeline_id: str, n: int, **fields: Any) -> list[str]:
    return await tracker.create_tasks(
        [TaskCreate(pipeline_id=pipeline_id, title=f"t{i}", **fields) for i in range(n)]
    )


class FnExecutor:
    """An in-process executor calling ``fn(ctx)``; the test decides what it does."""

    def __init__(self, fn: Callable[[ExecutionContext], Any]) -> None:
        self.fn = fn
        self.calls = 0

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        self.calls += 1
        result = await self.fn(ctx)
        return result if result is not None else Transition()


def role(name: str, fn: Callable[[ExecutionContext], Any], **kw: Any) -> Role:
    return Role(config=RoleConfig(name=name, executor="test", **kw), executor=FnExecutor(fn))


def worker_config(**kw: Any) -> WorkerConfig:
    base: dict[str, Any] = {
        "agent_id": "w1",
        "concurrency": 2,
        "lease_ttl_s": 3.0,
        "idle_min_s": 0.01,
        "idle_max_s": 0.1,
        "shutdown_grace_s": 5.0,
        "maintenance_interval_s": 0.5,
        "report_flush_s": 0.05,
    }
    base.update(kw)
    return WorkerConfig(**base)


async def wait_until(predicate: Callable[[], Any], timeout: float = 10.0) -> None:
    """Poll an (async or sync) predicate until it is truthy, with a deadline."""
    with anyio.fail_after(timeout):
        while True:
            value = predicate()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return
            await anyio.sleep(0.01)


async def start_worker(tg: anyio.abc.TaskGroup, worker: Worker) -> None:
    await tg.start(lambda task_status: worker.run(task_status=task_status))
