"""``backlog-worker submit TITLE --wait``: enqueue a task and block until it finishes.

It may touch the tracker (``create_task``, then ``wait``) and the terminal; the task's fields are
:mod:`worker.cli.ops.taskopts`'s, the artifacts' rendering :mod:`worker.cli.ops.task_show`'s.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

import anyio
import click

from tracker_client.models import WaitResult
from tracker_client.protocol import Tracker
from worker.cli.ops.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    DurationType,
    OpsContext,
    OpsError,
    common_options,
    escape_controls,
    fmt_age,
    fmt_when,
    input_errors,
    now_ms,
    resolve_pipeline,
)
from worker.cli.ops.task_show import render_artifacts, short_json
from worker.cli.ops.taskopts import TaskFields, build_task, task_field_options

__all__ = ["outcome_message", "submit"]

#: Longest single ``wait`` call; a longer wait loops (keeps remote requests short).
WAIT_SLICE_S = 30.0


def outcome_message(task_id: str, result: WaitResult, waited_s: float | None) -> tuple[int, str]:
    """The exit code and the one-line message for a wait's result."""
    task = result.task
    run = task.latest_run
    if result.outcome == "done":
        return EXIT_OK, f"task {task_id} done: stage {task.stage}"
    if result.outcome == "pending":
        if run is not None and run.status == "running":
            where = f"running in stage {task.stage!r} (attempt {run.attempt}, agent {run.agent_id})"
        elif task.next_eligible_at_ms > now_ms():
            retry = fmt_when(task.next_eligible_at_ms)
            where = f"queued in stage {task.stage!r}, retrying at {retry}"
        else:
            where = f"queued in stage {task.stage!r}"
        took = f" after {fmt_age(int((waited_s or 0) * 1000))}" if waited_s is not None else ""
        return EXIT_TIMEOUT, (
            f"timed out{took} waiting for task {task_id}; it stays {where} and may still "
            f"finish (follow it: backlog-worker task show {task_id})"
        )
    if result.outcome == "cancelled":
        return EXIT_FAILURE, f"task {task_id} was cancelled (stage {task.stage})"
    if result.outcome == "expired":
        return EXIT_FAILURE, f"task {task_id} expired before a worker finished it"
    reason = task.dead_letter_reason or "dead_lettered"
    error = f"; last error: {short_json(run.error, 200)}" if run is not None and run.error else ""
    return EXIT_FAILURE, (
        f"task {task_id} dead-lettered ({reason}) in stage {task.stage}"
        f" after {run.attempt if run else 0} attempt(s){error}"
    )


async def wait_until_finished(
    tracker: Tracker, task_id: str, timeout_s: float | None
) -> WaitResult:
    """``tracker.wait`` in slices until finished or ``timeout_s`` (None = forever) has passed."""
    deadline = math.inf if timeout_s is None else anyio.current_time() + timeout_s
    while True:
        remaining = deadline - anyio.current_time()
        result = await tracker.wait(task_id, timeout_s=max(0.0, min(WAIT_SLICE_S, remaining)))
        if result.finished or anyio.current_time() >= deadline:
            return result


@click.command("submit", short_help="Submit a task; with --wait, block until it finishes.")
@click.argument("title")
@task_field_options
@click.option("--wait/--no-wait", default=False, help="Block until the task finishes.")
@click.option(
    "--timeout",
    type=DurationType(),
    default=None,
    help="Give up waiting after this long (e.g. 10m); the task stays queued. Default: forever.",
)
@common_options
def submit(
    title: str,
    wait: bool,
    timeout: float | None,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Submit a task (TITLE) and, with --wait, block until it reaches a terminal stage.

    Prints the final stage, the artifacts and the `result` event. Exit 0 when done, 1 when it
    was dead-lettered or cancelled, 4 when the backlog is full, 5 when --timeout passed (the task
    stays queued or running and may still finish).

    \b
    backlog-worker submit -p review "Summarise incident 42" -m '{"ticket": 42}' --wait --timeout 10m
    """
    ops = OpsContext.build(tracker_url, config_path, as_json)
    fields = TaskFields.pop_from(kwargs)
    with input_errors():
        if not fields.pipeline:
            raise OpsError("missing --pipeline NAME|ID", EXIT_USAGE)
        if timeout is not None and not wait:
            raise OpsError("--timeout only applies with --wait", EXIT_USAGE)
        fields.as_payload(title)  # fail on bad flags before opening the tracker
    created: list[str] = []

    async def run(tracker: Tracker) -> int:
        pipeline = await resolve_pipeline(tracker, fields.pipeline or "")
        task = build_task(pipeline.id, title, fields)
        task_id = await tracker.create_task(task, idempotency_key=fields.idempotency_key)
        created.append(task_id)
        if not wait:
            if ops.as_json:
                ops.emit_json({"id": task_id})
            else:
                ops.print(f"submitted task {task_id}")
            return EXIT_OK
        click.echo(f"submitted task {task_id}; waiting for it to finish", err=True)
        started = anyio.current_time()
        status = (
            ops.console.status(f"waiting for task {task_id}")
            if ops.console.is_terminal and not ops.as_json
            else contextlib.nullcontext()
        )
        with status:
            result = await wait_until_finished(tracker, task_id, timeout)
        code, message = outcome_message(task_id, result, anyio.current_time() - started)
        if ops.as_json:
            ops.emit_json({"id": task_id, **result.model_dump(mode="json")})
        elif code in (EXIT_OK, EXIT_FAILURE):
            _print_result(ops, result)
        if code == EXIT_OK:
            if not ops.as_json:
                ops.print(message)
        else:
            click.echo(f"error: {escape_controls(message)}", err=True)
        return code

    def interrupted() -> str:
        if created:
            return f"interrupted; task {created[0]} stays queued and may still finish"
        return "interrupted"

    ops.run(run, interrupted=interrupted)


def _print_result(ops: OpsContext, result: WaitResult) -> None:
    task = result.task
    ops.print(f"{task.title} -> stage {task.stage} ({result.outcome})")
    if result.result_event is not None:
        ops.print(f"result: {short_json(result.result_event.data, 2000)}")
    if result.artifacts:
        ops.print(render_artifacts(result.artifacts))
