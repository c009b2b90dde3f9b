"""``backlog-worker submit TITLE --wait``: enqueue a task and block until it finishes.

It may touch the tracker (``create_task``, then ``wait``) and the terminal; the task's fields are
:mod:`worker.cli.ops.task.fields`'s, the artifacts' rendering :mod:`worker.cli.ops.task.show`'s.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import click

from tracker_client.ops_models import WaitResult
from tracker_client.protocol import Tracker
from worker.cli.ops.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    DurationType,
    OpsContext,
    OpsError,
    common_options,
    escape_controls,
    input_errors,
    resolve_pipeline,
)
from worker.cli.ops.outcome import outcome_message, short_json
from worker.cli.ops.task.fields import TaskFields, build_task, task_field_options
from worker.cli.ops.task.show import render_artifacts

__all__ = ["outcome_message", "submit"]

#: Longest single ``wait`` call; a longer wait loops (keeps remote requests short).
WAIT_SLICE_S = 30.0
#: ``submit --wait``'s slices: how soon a task reaching a human step is said to be waiting.
HUMAN_CHECK_S = 5.0


async def wait_until_finished(
    tracker: Tracker,
    task_id: str,
    timeout_s: float | None,
    *,
    slice_s: float = WAIT_SLICE_S,
    pending: Callable[[WaitResult], Awaitable[None]] | None = None,
) -> WaitResult:
    """``tracker.wait`` in slices until finished or ``timeout_s`` (None = forever) has passed;
    ``pending`` sees each unfinished slice's answer (the first one at once)."""
    deadline = math.inf if timeout_s is None else anyio.current_time() + timeout_s
    first = True
    while True:
        remaining = deadline - anyio.current_time()
        wait_s = 0.0 if first and pending is not None else min(slice_s, remaining)
        first = False
        result = await tracker.wait(task_id, timeout_s=max(0.0, wait_s))
        if result.finished or anyio.current_time() >= deadline:
            return result
        if pending is not None:
            await pending(result)


class HumanStepNotice:
    """Says once per stage, on stderr, that a waited task sits at a human step (a stage with no
    role): ``waiting for a human at stage S: backlog-worker task transition ID <trigger>``."""

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker
        self._said: set[tuple[str, int]] = set()
        self._roles: dict[str, dict[str, Any]] = {}

    async def __call__(self, result: WaitResult) -> None:
        """Look at one unfinished wait's answer."""
        task = result.task
        run = task.latest_run
        if task.dead_letter_reason is not None or (run is not None and run.status == "running"):
            return
        if (task.stage, task.task_version) in self._said:
            return
        states = self._roles.get(task.pipeline_id)
        if states is None:
            definition = (await self._tracker.get_pipeline(task.pipeline_id)).definition
            states = self._roles[task.pipeline_id] = dict(definition.get("states") or {})
        state = states.get(task.stage)
        if not isinstance(state, dict) or state.get("agent_role") or state.get("terminal"):
            return
        self._said.add((task.stage, task.task_version))
        triggers = "|".join(t.trigger for t in task.available_transitions) or "(none)"
        click.echo(
            escape_controls(
                f"waiting for a human at stage {task.stage}: backlog-worker task transition "
                f"{task.id} <trigger>  (triggers: {triggers})"
            ),
            err=True,
        )


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
            result = await wait_until_finished(
                tracker,
                task_id,
                timeout,
                slice_s=HUMAN_CHECK_S,
                pending=HumanStepNotice(tracker),
            )
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
