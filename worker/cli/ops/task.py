"""``backlog-worker task add|list|cancel|requeue|cancel-all`` (``show`` is in ops_task_show,
``transition`` in ops_task_transition)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracker_client import calls
from tracker_client.errors import NotFound, Unsupported
from tracker_client.protocol import Tracker
from worker.cli.ops.common import (
    EXIT_USAGE,
    OpsContext,
    OpsError,
    common_options,
    input_errors,
    resolve_pipeline,
    stdin_is_tty,
)
from worker.cli.ops.task_list import task_list
from worker.cli.ops.task_show import task_show
from worker.cli.ops.task_transition import task_transition
from worker.cli.ops.taskopts import (
    DeadLetterReplay,
    TaskFields,
    build_task,
    dead_letter_replay_options,
    read_task_file,
    task_field_options,
)

__all__ = ["task_group"]


@click.group("task")
def task_group() -> None:
    """Enqueue, list, inspect, cancel and requeue tasks."""


task_group.add_command(task_show)
task_group.add_command(task_list)
task_group.add_command(task_transition)


@task_group.command("add")
@click.argument("title", required=False)
@task_field_options
@click.option(
    "--from-file",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    help="Bulk create from JSON lines, one task object per line ('-' = stdin); all or nothing.",
)
@common_options
def task_add(
    title: str | None,
    from_file: Path | None,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Add a task (TITLE) to a pipeline, or many with --from-file.

    \b
    backlog-worker task add -p review "Write the changelog" --priority 5 -m '{"repo": "web"}'
    backlog-worker task add -p review --from-file tasks.jsonl
    """
    ops = OpsContext.build(tracker_url, config_path, as_json)
    fields = TaskFields.pop_from(kwargs)
    with input_errors():
        if from_file is not None:
            if title is not None:
                raise OpsError("give a TITLE or --from-file, not both", EXIT_USAGE)
            bulk_only = TaskFields(pipeline=fields.pipeline, idempotency_key=fields.idempotency_key)
            if fields != bulk_only:
                raise OpsError(
                    "with --from-file only --pipeline and --idempotency-key apply; "
                    "put the other fields in the file",
                    EXIT_USAGE,
                )
        else:
            if title is None:
                raise OpsError("missing TITLE (or --from-file)", EXIT_USAGE)
            if not fields.pipeline:
                raise OpsError("missing --pipeline NAME|ID", EXIT_USAGE)
            fields.as_payload(title)  # fail on bad flags before opening the tracker

    async def add(tracker: Tracker) -> int:
        if from_file is not None:
            tasks = await read_task_file(tracker, from_file, fields.pipeline)
            ids = await tracker.create_tasks(tasks, idempotency_key=fields.idempotency_key)
            if ops.as_json:
                ops.emit_json({"ids": ids})
            else:
                # A count, not thousands of id lines: --json gives the ids.
                ops.print(f"created {len(ids)} task{'' if len(ids) == 1 else 's'} (ids: --json)")
            return 0
        pipeline = await resolve_pipeline(tracker, fields.pipeline or "")
        task = build_task(pipeline.id, title or "", fields)
        task_id = await tracker.create_task(task, idempotency_key=fields.idempotency_key)
        if ops.as_json:
            ops.emit_json({"id": task_id})
        else:
            initial = pipeline.definition.get("initial")
            ops.print(f"created task {task_id} in pipeline {pipeline.name}, stage {initial}")
        return 0

    ops.run(add)


@task_group.command("cancel", short_help="Cancel a task (a running one loses its lease).")
@click.argument("task_id")
@click.option("--reason", default="cancelled", show_default=True, help="Recorded reason.")
@common_options
def task_cancel(
    task_id: str, reason: str, tracker_url: str | None, config_path: Path | None, as_json: bool
) -> None:
    """Cancel a task: unclaimable at once; a running one loses its lease."""
    ops = OpsContext.build(tracker_url, config_path, as_json)

    async def cancel(tracker: Tracker) -> int:
        try:
            result = await tracker.cancel(task_id, reason=reason)
        except NotFound:
            raise OpsError(f"unknown task {task_id!r}") from None
        if ops.as_json:
            ops.emit_json(result)
        else:
            revoked = "; its running lease was revoked" if result.revoked_lease else ""
            ops.print(f"cancelled task {task_id} (now in stage {result.stage}){revoked}")
        return 0

    ops.run(cancel)


@task_group.command(
    "requeue", short_help="Requeue a dead-lettered task, or every one of a pipeline."
)
@click.argument("task_id", required=False)
@click.option("--stage", help="Stage to requeue into (default: where it was dead-lettered).")
@click.option(
    "--keep-attempts",
    is_flag=True,
    help="Keep the failure count (default: the retry budget restarts).",
)
@dead_letter_replay_options
@common_options
def task_requeue(
    task_id: str | None,
    stage: str | None,
    keep_attempts: bool,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Bring a dead-lettered or cancelled task back to work, or (--dead-lettered) every
    dead-lettered task of a pipeline.

    \b
    backlog-worker task requeue TASK_ID [--stage S] [--keep-attempts]
    backlog-worker task requeue --dead-lettered -p review --reason crash_loop --since 1h --dry-run
    """
    ops = OpsContext.build(tracker_url, config_path, as_json)
    replay = DeadLetterReplay.pop_from(kwargs)
    with input_errors():
        replay.check(task_id)
    if replay.dead_lettered:
        ops.run(lambda tracker: _requeue_dead_letters(ops, tracker, replay, stage, keep_attempts))
        return

    async def requeue(tracker: Tracker) -> int:
        try:
            result = await tracker.requeue(
                task_id or "", stage=stage, reset_attempts=not keep_attempts
            )
        except NotFound:
            raise OpsError(f"unknown task {task_id!r}") from None
        if ops.as_json:
            ops.emit_json(result)
        else:
            budget = "fresh retry budget" if result.reset_attempts else "failure count kept"
            ops.print(f"requeued task {task_id} into stage {result.stage} ({budget})")
        return 0

    ops.run(requeue)


async def _requeue_dead_letters(
    ops: OpsContext,
    tracker: Tracker,
    replay: DeadLetterReplay,
    stage: str | None,
    keep_attempts: bool,
) -> int:
    """``task requeue --dead-lettered``: the rail's ``requeue_all`` operation, then one line."""
    pipeline = await resolve_pipeline(tracker, replay.pipeline or "")
    try:
        result = await calls.REQUEUE_ALL.call(
            tracker,
            pipeline_id=pipeline.id,
            reason=replay.reason,
            since_ms=replay.since_ms(),
            stage=stage,
            dry_run=replay.dry_run,
            reset_attempts=not keep_attempts,
        )
    except Unsupported as exc:
        raise OpsError(f"task requeue --dead-lettered: {exc}") from None
    if ops.as_json:
        ops.emit_json(result)
        return 0
    n = result.requeued
    what = f"{n} dead-lettered task{'' if n == 1 else 's'} of pipeline {pipeline.name}"
    split = ", ".join(f"{why} {count}" for why, count in result.by_reason.items())
    if result.dry_run:
        ops.print(f"dry run: {what} would be requeued ({split or 'none match'}); nothing written")
    else:
        budget = "fresh retry budget" if not keep_attempts else "failure count kept"
        ops.print(f"requeued {what} ({f'{split}; ' if split else ''}{budget})")
    return 0


@task_group.command("cancel-all", short_help="Cancel every open task of a pipeline or role.")
@click.option("--pipeline", "-p", metavar="NAME|ID", help="Every open task of this pipeline.")
@click.option("--role", "-r", help="Every open task in this role's stages.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@common_options
def task_cancel_all(
    pipeline: str | None,
    role: str | None,
    yes: bool,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Cancel every waiting and running task of a pipeline and/or role."""
    ops = OpsContext.build(tracker_url, config_path, as_json)
    with input_errors():
        if not pipeline and not role:
            raise OpsError("cancel-all needs --pipeline and/or --role", EXIT_USAGE)
        if not yes:
            if not stdin_is_tty():
                raise OpsError("cancel-all asks for confirmation: pass --yes", EXIT_USAGE)
            scope = " and ".join(
                x for x in (pipeline and f"pipeline {pipeline}", role and f"role {role}") if x
            )
            click.confirm(f"Cancel every open task of {scope}?", abort=True)

    async def cancel_all(tracker: Tracker) -> int:
        pipeline_id = (await resolve_pipeline(tracker, pipeline)).id if pipeline else None
        count = await tracker.cancel_all(pipeline_id=pipeline_id, role=role)
        if ops.as_json:
            ops.emit_json({"cancelled": count})
        else:
            ops.print(f"cancelled {count} task{'s' if count != 1 else ''}")
        return 0

    ops.run(cancel_all)
