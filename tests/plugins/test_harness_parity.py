"""The harness and a real worker end a run the same way, with the same message.

Both call the executor through :mod:`plugins.supervise`; these tests run one executor in
each (a real :class:`~worker.daemon.Worker` on a real SQLite rail) and compare the failure the
harness returns with the run's error and ``error`` event as the tracker recorded them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import Executor, Failure
from plugins.python.executor import PythonExecutor
from plugins.testing import ExecutorHarness
from tracker_client.factory import open_tracker
from tracker_client.models import Event, RetryPolicy, Run, TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

MOD = "tests.plugins.sample_callables"
PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


def py(name: str) -> PythonExecutor:
    return PythonExecutor({"callable": f"{MOD}:{name}"})


async def worker_failure(
    tracker: Tracker, tmp_path: Path, executor: Executor, **metadata: Any
) -> tuple[Run, dict[str, Any]]:
    """Run one task through a real worker; its failed run and its ``error`` event's data."""
    pipeline_id = await tracker.create_pipeline("flow", PIPELINE)
    [task_id] = await tracker.create_tasks(
        [
            TaskCreate(
                pipeline_id=pipeline_id,
                title="t",
                metadata=metadata,
                retry_policy=RetryPolicy(max_attempts=1),
            )
        ]
    )
    role = Role(config=RoleConfig(name="coder", executor="python"), executor=executor)
    config = WorkerConfig(
        agent_id="w1", lease_ttl_s=5.0, drain=True, idle_min_s=0.01, idle_max_s=0.05
    )
    worker = Worker(tracker, config.model_copy(update={"workdir": tmp_path / "runs"}), [role])
    with anyio.fail_after(30):
        await worker.run()
    [run] = await tracker.list_runs(task_id)
    events: list[Event] = (await tracker.list_task_events(task_id, kind="error")).items
    [error] = [e.data for e in events]
    return run, error


async def test_a_timeout_reads_the_same_in_the_harness_and_in_the_worker(
    tracker: Tracker, tmp_path: Path
) -> None:
    harness = ExecutorHarness(workdir=tmp_path / "h", timeout_s=0.3)
    outcome = await harness.run(py("wait_forever"))
    run, error = await worker_failure(tracker, tmp_path, py("wait_forever"), timeout_s=0.3)
    assert isinstance(outcome, Failure) and outcome.reason == "timeout"
    assert outcome.message == "the executor did not finish within 0.3s"
    assert run.error == f"{outcome.reason}: {outcome.message}"
    assert (error["reason"], error["message"]) == (outcome.reason, outcome.message)
    assert error["retryable"] is outcome.retryable


async def test_an_executor_exception_reads_the_same_in_the_harness_and_in_the_worker(
    tracker: Tracker, tmp_path: Path
) -> None:
    harness = ExecutorHarness(workdir=tmp_path / "h", raise_errors=False)
    outcome = await harness.run(py("explode"))
    run, error = await worker_failure(tracker, tmp_path, py("explode"))
    assert isinstance(outcome, Failure) and outcome.reason == "executor_error"
    assert "kaboom" in outcome.message
    assert run.error == f"{outcome.reason}: {outcome.message}"
    # the error event carries the failure's details (which name the exception's own message)
    assert error["reason"] == outcome.reason
    assert {k: error[k] for k in ("type", "message")} == {
        k: outcome.details[k] for k in ("type", "message")
    }
    # by default the harness raises it instead, for the traceback
    with pytest.raises(Exception, match="kaboom"):
        await ExecutorHarness(workdir=tmp_path / "h").run(py("explode"))
