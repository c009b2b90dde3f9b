"""Helpers for the TaskRun tests (``tests/worker/test_run_*.py``): one claimed task, run directly.

A run is driven the way the daemon drives it (a :class:`~worker.keeper.LeaseKeeper` task plus
:meth:`TaskRun.execute`), on a real tracker, so a test can hand it a lease it tampered with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from plugins.api import Executor
from tracker_client.models import Lease, TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig
from worker.keeper import LeaseKeeper
from worker.retry import RetryPolicy
from worker.run import RunResult, RunSettings, TaskRun

#: Fast retries, so a test of a failing call does not wait seconds per attempt.
FAST_RETRY = RetryPolicy(initial_s=0.01, max_s=0.05)

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


async def claim_one(tracker: Tracker, ttl_s: float = 3.0, **task: Any) -> Lease:
    """Create a pipeline and one task on ``tracker`` and claim it as role ``coder``."""
    pipeline_id = await tracker.create_pipeline("flow", PIPELINE)
    await tracker.create_tasks([TaskCreate(pipeline_id=pipeline_id, title="t", **task)])
    lease = await tracker.claim("w1", "coder", int(ttl_s * 1000))
    assert lease is not None
    return lease


def settings(workdir_base: Path, ttl_s: float = 3.0, **kw: Any) -> RunSettings:
    """Run settings for tests: fast retries, a short report budget."""
    base: dict[str, Any] = {
        "lease_ttl_s": ttl_s,
        "retry": FAST_RETRY,
        "report_retry_budget_s": 5.0,
        "workdir_base": workdir_base,
        "report_flush_s": 0.05,
    }
    base.update(kw)
    return RunSettings(**base)


async def run_task(
    tracker: Tracker,
    lease: Lease,
    executor: Executor,
    run_settings: RunSettings,
    *,
    role: RoleConfig | None = None,
    on_run: Callable[[TaskRun], None] | None = None,
) -> RunResult:
    """Execute ``lease`` with ``executor`` under a keeper, as the daemon does; the result."""
    keeper = LeaseKeeper()
    async with anyio.create_task_group() as tg:
        await tg.start(keeper.run)
        run = TaskRun(
            tracker=tracker,
            lease=lease,
            role=role or RoleConfig(name="coder", executor="test"),
            executor=executor,
            settings=run_settings,
            shutdown=anyio.Event(),
            keeper=keeper,
        )
        if on_run is not None:
            on_run(run)
        with anyio.CancelScope() as scope:  # a runner task's, as the daemon hands it
            result = await run.execute(scope)
        tg.cancel_scope.cancel()
    return result
