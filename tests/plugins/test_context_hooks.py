"""The runner's side of a context (plugins.context_hooks): what the worker and the harness keep
of a run, out of the executor's face, and the built-in executors using that face only."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext, Outcome, Transition
from plugins.context_hooks import ContextHooks, ReportPolicy
from plugins.rundir_lock import lock_if_unused
from plugins.testing import ExecutorHarness, RecordingSink

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

#: What an executor may read of ``ctx``: the pinned methods (tests/test_public_api.py) and the
#: attributes the class docstring lists (docs/executors/plugin-api.md).
AUTHOR_FACE = {
    *("artifact", "artifact_file", "checkpoint", "flush", "read_upstream", "report"),
    "report_cost",
    *("shutting_down", "spawn", "store", "time_remaining", "wait_shutdown", "workdir"),
    *("task", "run", "attempt", "options", "instructions", "deadline", "logger"),
    *("traceparent", "previous_checkpoint", "upstream"),
}


def context(hooks: ContextHooks) -> ExecutionContext:
    harness = ExecutorHarness()
    return ExecutionContext(task=harness.task, run=harness.run_model, hooks=hooks)


async def test_the_workdir_is_made_and_held_on_first_use_and_let_go_by_the_runner(
    tmp_path: Path,
) -> None:
    hooks = ContextHooks(RecordingSink(), str(tmp_path / "run"))
    ctx = context(hooks)
    assert not hooks.workdir_created and not (tmp_path / "run").exists()
    assert ctx.workdir == tmp_path / "run" and (tmp_path / "run").is_dir()
    assert hooks.workdir_created
    assert lock_if_unused(str(tmp_path / "run")) is None  # a live run holds it
    hooks.release_workdir()
    hooks.release_workdir()  # idempotent
    fd = lock_if_unused(str(tmp_path / "run"))
    assert fd is not None
    os.close(fd)


async def test_the_runner_takes_the_last_reports_merged_or_none_while_a_flush_writes(
    tmp_path: Path,
) -> None:
    release = anyio.Event()

    class SlowSink(RecordingSink):
        async def emit_events(self, events: list[tuple[str, Any]]) -> None:
            await release.wait()
            await super().emit_events(events)

    sink = SlowSink()
    hooks = ContextHooks(sink, tmp_path, policy=ReportPolicy(flush_interval_s=60))
    ctx = context(hooks)
    await ctx.report("line", {"i": 1})
    await ctx.report("line", {"i": 2})
    await ctx.report("done")
    assert hooks.has_buffered_reports
    assert hooks.take_reports() == [("line", {"batch": [{"i": 1}, {"i": 2}]}), ("done", {})]
    assert not hooks.has_buffered_reports and hooks.take_reports() == []
    await ctx.report("late")
    async with anyio.create_task_group() as tg:
        tg.start_soon(ctx.flush)
        await anyio.wait_all_tasks_blocked()
        assert hooks.take_reports() is None  # the flush in flight owns the buffer
        release.set()
    assert sink.written == [("late", {})]


class QuietAfterOne:
    """Reports once, then waits without reporting or flushing until ``go`` is set."""

    def __init__(self) -> None:
        self.go = anyio.Event()

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        await ctx.report("started")
        await self.go.wait()
        return Transition("complete")


async def test_the_harness_flushes_a_quiet_executors_reports_on_the_interval_as_a_worker(
    tmp_path: Path,
) -> None:
    policy = ReportPolicy(flush_interval_s=0.02, max_events=100)
    harness = ExecutorHarness(workdir=tmp_path, report_policy=policy)
    executor = QuietAfterOne()
    async with anyio.create_task_group() as tg:

        async def release_once_seen() -> None:
            await harness.wait_for_event("started", timeout_s=10)
            executor.go.set()

        tg.start_soon(release_once_seen)
        assert await harness.run(executor) == Transition("complete")
    assert harness.events == [("started", {})]


def test_the_context_keeps_no_runner_hook_in_its_face() -> None:
    hooks = {"take_reports", "has_buffered_reports", "workdir_created", "release_workdir"}
    assert not hooks & set(dir(ExecutionContext))
    assert "report_policy" not in dir(ExecutionContext) and "sink" not in dir(ExecutionContext)


@pytest.mark.parametrize("package", ["command", "nullclaw", "python"])
def test_the_built_in_executors_read_only_the_authors_face_of_ctx(package: str) -> None:
    """``ctx.<name>`` in a built-in executor names a member an author has; the runner's hooks
    (a report policy, whether the workdir exists) are not theirs to read."""
    found = []
    for path in sorted((ROOT / "plugins" / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "ctx"
                and node.attr not in AUTHOR_FACE
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: ctx.{node.attr}")
    assert not found, "\n".join(found)


async def test_the_hooks_of_0_1_still_answer_on_ctx_with_a_deprecation_warning(
    tmp_path: Path,
) -> None:
    """docs/reference/stability.md: a removed member keeps working, warning, for a minor."""
    policy = ReportPolicy(flush_interval_s=60)
    hooks = ContextHooks(RecordingSink(), tmp_path / "run", policy=policy)
    ctx = context(hooks)
    await ctx.report("line", {"i": 1})
    with pytest.warns(DeprecationWarning, match=r"ExecutionContext.report_policy .* 0\.2"):
        assert ctx.report_policy is policy
    with pytest.warns(DeprecationWarning, match="has_buffered_reports"):
        assert ctx.has_buffered_reports is True
    with pytest.warns(DeprecationWarning, match="take_reports"):
        assert ctx.take_reports() == [("line", {"i": 1})]
    with pytest.warns(DeprecationWarning, match="workdir_created"):
        assert ctx.workdir_created is False
    assert ctx.workdir.is_dir()
    with pytest.warns(DeprecationWarning, match="release_workdir"):
        ctx.release_workdir()
    fd = lock_if_unused(str(tmp_path / "run"))
    assert fd is not None
    os.close(fd)
    with pytest.raises(AttributeError, match="'ExecutionContext' object has no attribute 'nope'"):
        ctx.nope  # noqa: B018
