"""Plain ``def`` functions in the python executor: a real thread, a real cancel, a real worker.

The functions below are named by import path (``tests.plugins.test_api_sync:...``), as a role
would name them; module-level threading events let a test steer a function from the loop.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import Failure, Transition
from plugins.python.executor import PythonExecutor
from plugins.python.sync import RunCancelled, ThreadContext
from plugins.testing import ExecutorHarness
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

pytestmark = pytest.mark.anyio

MOD = "tests.plugins.test_api_sync"
GATE = threading.Event()  # opened by a test to let a blocked function go on
SAW: dict[str, Any] = {}  # what a function observed, read by its test
DONE = threading.Event()  # set by a function as its very last act


@pytest.fixture(autouse=True)
def _reset() -> None:
    GATE.clear()
    DONE.clear()
    SAW.clear()


# -- the functions under test (plain def) --------------------------------------------------------
def reports_from_its_thread(ctx: ThreadContext) -> dict[str, Any]:
    SAW["thread"] = threading.current_thread()
    ctx.report("started", {"attempt": ctx.attempt, "option": ctx.options.get("extra")})
    if not GATE.wait(20):  # blocks its thread, not the loop: the test opens it after "started"
        raise TimeoutError("the gate never opened")
    (ctx.workdir / "out.txt").write_text("made in a thread\n")
    artifact_id = ctx.artifact_file("out.txt", kind="report", meta={"by": "thread"})
    return {"trigger": "complete", "usage": {"artifact_id": artifact_id}}


def stops_when_cancelled(ctx: ThreadContext) -> None:
    ctx.report("started", {}, flush=True)
    while not ctx.cancel_event.wait(0.01):  # an interruptible sleep
        pass
    SAW["cancelled"] = ctx.cancelled
    try:
        ctx.report("after_cancel", {})
    except RunCancelled as exc:
        SAW["refused"] = str(exc)
    DONE.set()


def ignores_cancel(ctx: ThreadContext) -> dict[str, str]:
    SAW["thread"] = threading.current_thread()
    ctx.report("started", {}, flush=True)
    GATE.wait(20)  # never looks at ctx.cancelled
    try:
        ctx.report("late", {})
    except RunCancelled:
        SAW["late_refused"] = True
    DONE.set()
    return {"trigger": "discarded"}


def raises(ctx: ThreadContext) -> None:
    raise ValueError("bad input in a thread")


def exits(ctx: ThreadContext) -> None:
    sys.exit(3)


async def _coro() -> None:
    return None


def returns_a_coroutine(ctx: ThreadContext) -> Awaitable[None]:
    return _coro()


# -- in the harness ------------------------------------------------------------------------------
async def test_plain_def_runs_in_its_own_thread_while_the_loop_goes_on(tmp_path: Path) -> None:
    options = {"callable": f"{MOD}:reports_from_its_thread", "extra": 7}
    harness = ExecutorHarness(workdir=tmp_path, options=options)
    result: list[Any] = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                result.append(await harness.run(PythonExecutor(options)))

            tg.start_soon(run)
            # the loop still serves the harness while the function blocks on GATE
            assert await harness.wait_for_event("started") == {"attempt": 1, "option": 7}
            GATE.set()
    (outcome,) = result
    assert isinstance(outcome, Transition) and outcome.trigger == "complete"
    assert SAW["thread"] is not threading.main_thread()
    assert SAW["thread"].daemon
    (artifact,) = harness.artifacts
    assert outcome.usage == {"artifact_id": "artifact-1"}
    data = b"made in a thread\n"
    assert artifact.kind == "report"
    assert artifact.uri == (tmp_path / "out.txt").resolve().as_uri()
    assert artifact.sha256 == hashlib.sha256(data).hexdigest()
    assert artifact.size_bytes == len(data)
    assert artifact.meta == {"by": "thread"}
    assert artifact.run_id == harness.run_model.id


async def test_cancel_sets_the_flag_and_closes_the_context(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    executor = PythonExecutor({"callable": f"{MOD}:stops_when_cancelled"})
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(harness.cancel_on_event, "started")
            outcome = await harness.run(executor)
        assert await anyio.to_thread.run_sync(DONE.wait, 20)
    assert harness.cancelled
    assert isinstance(outcome, Failure) and outcome.reason == "cancelled"
    assert SAW["cancelled"] is True
    assert "was cancelled" in SAW["refused"]
    assert [kind for kind, _ in harness.events] == ["started"]


async def test_cancel_does_not_wait_for_a_thread_that_ignores_it(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    executor = PythonExecutor({"callable": f"{MOD}:ignores_cancel"})
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(harness.cancel_on_event, "started")
                outcome = await harness.run(executor)
        # the run ended although its function is still blocked in its thread
        assert isinstance(outcome, Failure) and outcome.reason == "cancelled"
        assert SAW["thread"].is_alive()
        assert not DONE.is_set()
    finally:
        GATE.set()
    with anyio.fail_after(30):
        assert await anyio.to_thread.run_sync(DONE.wait, 20)
    # once it went on, its context refused to write for the ended run
    assert SAW["late_refused"] is True
    assert [kind for kind, _ in harness.events] == ["started"]


async def test_exceptions_and_bad_results_of_plain_functions(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    with pytest.raises(ValueError, match="bad input in a thread"):
        await harness.run(PythonExecutor({"callable": f"{MOD}:raises"}))
    # SystemExit in a task must not stop the worker
    with pytest.raises(RuntimeError, match="raised SystemExit: 3"):
        await harness.run(PythonExecutor({"callable": f"{MOD}:exits"}))
    outcome = await harness.run(PythonExecutor({"callable": f"{MOD}:returns_a_coroutine"}))
    assert isinstance(outcome, Failure) and outcome.reason == "bad_executor_output"
    assert "declare it async def" in outcome.message


STUBBORN_EXIT = f"""
import anyio, sys, threading
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from plugins.python.executor import PythonExecutor
from plugins.testing import ExecutorHarness

async def main():
    harness = ExecutorHarness()
    async with anyio.create_task_group() as tg:
        tg.start_soon(harness.cancel_on_event, "started")
        outcome = await harness.run(PythonExecutor({{"callable": "{MOD}:ignores_cancel"}}))
    print(outcome.reason, [t.name for t in threading.enumerate() if t.daemon], flush=True)

anyio.run(main)
"""


def test_an_abandoned_thread_does_not_hold_the_process_exit(tmp_path: Path) -> None:
    # GATE is never opened in the child: its function blocks for 20 s; the process must end
    # as soon as its main code does, not when the abandoned thread returns.
    proc = subprocess.run(
        [sys.executable, "-c", STUBBORN_EXIT],
        capture_output=True,
        text=True,
        timeout=15,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("cancelled ['python executor tests.plugins.test_api_sync:")


# -- in a real worker on a real embedded tracker -------------------------------------------------
PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


def copies_its_artifact(ctx: ThreadContext) -> dict[str, str]:
    (ctx.workdir / "answer.md").write_text("# answer\n")
    copy = Path(str(ctx.options["keep_in"])) / f"{ctx.run.id}.md"
    ctx.artifact_file("answer.md", kind="answer", copy_to=copy)
    ctx.report("progress", {"remaining_s": ctx.time_remaining()}, flush=True)
    return {"trigger": "complete"}


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


def worker_for(
    tracker: Tracker, tmp_path: Path, options: dict[str, Any], **overrides: Any
) -> Worker:
    role = Role(
        config=RoleConfig(name="coder", executor="python", options=options),
        executor=PythonExecutor(options),
    )
    settings: dict[str, Any] = {
        "agent_id": "w1",
        "lease_ttl_s": 5.0,
        "idle_min_s": 0.01,
        "idle_max_s": 0.1,
        "report_flush_s": 0.05,
        "drain": True,
        "workdir": tmp_path / "runs",
    }
    return Worker(tracker, WorkerConfig(**{**settings, **overrides}), [role])


async def test_worker_runs_a_plain_def_and_keeps_its_copied_artifact(
    tracker: Tracker, tmp_path: Path
) -> None:
    pipeline_id = await tracker.create_pipeline("flow", PIPELINE)
    [task_id] = await tracker.create_tasks(
        [TaskCreate(pipeline_id=pipeline_id, title="t", metadata={"timeout_s": 30})]
    )
    options = {"callable": f"{MOD}:copies_its_artifact", "keep_in": str(tmp_path / "kept")}
    with anyio.fail_after(30):
        await worker_for(tracker, tmp_path, options).run()
    assert (await tracker.get_task(task_id)).stage == "done"
    (artifact,) = (await tracker.list_artifacts(task_id=task_id)).items
    [run] = await tracker.list_runs(task_id)
    kept = tmp_path / "kept" / f"{run.id}.md"
    assert artifact.uri == kept.as_uri()
    assert kept.read_bytes() == b"# answer\n"  # the run's directory is gone, the copy is not
    assert not any((tmp_path / "runs").iterdir())
    assert artifact.sha256 == hashlib.sha256(b"# answer\n").hexdigest()
    assert artifact.size_bytes == 9
    events = (await tracker.list_task_events(task_id, limit=100)).items
    (progress,) = [e.data for e in events if e.kind == "progress"]
    assert 0 < progress["remaining_s"] <= 30


async def test_worker_timeout_cancels_a_plain_def_cooperatively(
    tracker: Tracker, tmp_path: Path
) -> None:
    pipeline_id = await tracker.create_pipeline("flow", PIPELINE)
    [task_id] = await tracker.create_tasks(
        [
            TaskCreate(
                pipeline_id=pipeline_id,
                title="t",
                metadata={"timeout_s": 0.5},
                retry_policy=RetryPolicy(max_attempts=1),
            )
        ]
    )
    options = {"callable": f"{MOD}:stops_when_cancelled"}
    with anyio.fail_after(30):
        await worker_for(tracker, tmp_path, options).run()
        assert await anyio.to_thread.run_sync(DONE.wait, 20)
    [run] = await tracker.list_runs(task_id)
    assert run.status == "failed"
    assert run.error is not None and "did not finish within 0.5s" in run.error
    assert SAW["cancelled"] is True
    kinds = [e.kind for e in (await tracker.list_task_events(task_id, limit=100)).items]
    assert "started" in kinds and "after_cancel" not in kinds


async def test_worker_abandons_a_stubborn_plain_def_when_its_lease_is_revoked(
    tracker: Tracker, tmp_path: Path
) -> None:
    pipeline_id = await tracker.create_pipeline("flow", PIPELINE)
    [task_id] = await tracker.create_tasks([TaskCreate(pipeline_id=pipeline_id, title="t")])
    options = {"callable": f"{MOD}:ignores_cancel"}
    worker = worker_for(tracker, tmp_path, options, drain=False, lease_ttl_s=0.9)
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                while "started" not in [
                    e.kind for e in (await tracker.list_task_events(task_id, limit=100)).items
                ]:
                    await anyio.sleep(0.02)
                await tracker.cancel(task_id)
                # the heartbeat finds the lease gone and the run ends, the thread still blocked
                while worker.stats.in_flight:
                    await anyio.sleep(0.02)
                assert SAW["thread"].is_alive()
                worker.stop()
    finally:
        GATE.set()
    with anyio.fail_after(30):
        assert await anyio.to_thread.run_sync(DONE.wait, 20)
    assert SAW["late_refused"] is True
    kinds = [e.kind for e in (await tracker.list_task_events(task_id, limit=100)).items]
    assert "late" not in kinds
    assert (await tracker.get_task(task_id)).dead_letter_reason == "cancelled"
