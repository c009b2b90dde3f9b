"""plugins.testing: the harness plugin authors use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext, Failure, Outcome, ReportPolicy, Transition
from plugins.python.executor import PythonExecutor
from plugins.testing import ExecutorHarness
from tracker_client.errors import ExecutorError

pytestmark = pytest.mark.anyio

MOD = "tests.plugins.sample_callables"


def py(name: str) -> PythonExecutor:
    return PythonExecutor({"callable": f"{MOD}:{name}"})


class Chatty:
    """Reports several events quickly; the harness lists each one."""

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        for i in range(5):
            await ctx.report("line", {"i": i})
        (ctx.workdir / "out.txt").write_text("done")
        return Transition(trigger="complete")


class ReturnsJunk:
    async def execute(self, ctx: ExecutionContext) -> Any:
        return "complete"


async def test_builds_task_and_run_from_arguments(tmp_path: Path) -> None:
    harness = ExecutorHarness(
        title="a title",
        description="d",
        metadata={"k": 1},
        task_id="task-1",
        run_id="run-1",
        stage="review",
        attempt=3,
        role="reviewer",
        instructions="look closely",
        options={"o": 1},
        workdir=tmp_path / "wd",
    )
    outcome = await harness.run(Chatty())
    assert outcome == Transition(trigger="complete")
    ctx = harness.context
    assert ctx is not None
    assert (ctx.task.id, ctx.task.title, ctx.task.stage, ctx.task.metadata) == (
        "task-1",
        "a title",
        "review",
        {"k": 1},
    )
    assert (ctx.run.id, ctx.attempt, ctx.run.agent_role) == ("run-1", 3, "reviewer")
    assert ctx.instructions == "look closely"
    assert ctx.options == {"o": 1}
    assert harness.events == [("line", {"i": i}) for i in range(5)]
    assert (tmp_path / "wd" / "out.txt").read_text() == "done"


async def test_batching_policy_is_visible_in_written(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path, report_policy=ReportPolicy(flush_interval_s=60))
    await harness.run(Chatty())
    assert harness.sink.written == [("line", {"batch": [{"i": i} for i in range(5)]})]
    assert harness.events == [("line", {"i": i}) for i in range(5)]


async def test_temp_workdir_is_removed_unless_kept() -> None:
    harness = ExecutorHarness()
    await harness.run(Chatty())
    assert harness.workdir is not None
    assert not harness.workdir.exists()
    keep = ExecutorHarness(keep_workdir=True)
    await keep.run(Chatty())
    assert keep.workdir is not None
    try:
        assert (keep.workdir / "out.txt").read_text() == "done"
    finally:
        import shutil

        shutil.rmtree(keep.workdir)


async def test_cancel_mid_run(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(harness.cancel_on_event, "started")
            outcome = await harness.run(py("wait_forever"))
    assert harness.cancelled
    assert isinstance(outcome, Failure)
    assert outcome.reason == "cancelled"


async def test_cancel_before_run(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    harness.cancel()
    outcome = await harness.run(py("wait_forever"))
    assert harness.cancelled
    assert isinstance(outcome, Failure)
    # the request is consumed: the next run is not cancelled
    assert await harness.run(py("nothing")) == Transition()
    assert not harness.cancelled


async def test_signal_shutdown(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)

    async def shutdown_when_started() -> None:
        await harness.wait_for_event("started")
        harness.signal_shutdown()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(shutdown_when_started)
            outcome = await harness.run(py("until_shutdown"))
    assert outcome == Transition(trigger="checkpoint")
    assert not harness.cancelled


async def test_shutdown_signalled_before_run(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    harness.signal_shutdown()
    with anyio.fail_after(10):
        assert await harness.run(py("until_shutdown")) == Transition(trigger="checkpoint")


async def test_timeout(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path, timeout_s=0.2)
    with anyio.fail_after(10):
        outcome = await harness.run(py("wait_forever"))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "timeout"
    assert not harness.cancelled
    assert harness.context is not None
    assert harness.context.deadline is not None


async def test_exceptions_propagate_and_junk_is_refused(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    with pytest.raises(RuntimeError, match="kaboom"):
        await harness.run(py("explode"))
    with pytest.raises(ExecutorError, match=r"ReturnsJunk\.execute returned str"):
        await harness.run(ReturnsJunk())


async def test_wait_for_event_times_out(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    with pytest.raises(TimeoutError):
        await harness.wait_for_event("never", timeout_s=0.05)
