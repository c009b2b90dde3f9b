"""``backlog-worker task add``: enqueue one task from flags, or many from a JSON-lines file.

The flags (and the file's fields) are :mod:`.fields`'s, shared with ``submit``; they are checked
before any tracker is opened. A file is created all or nothing (``create_tasks``). It may touch
the tracker (``create_task``/``create_tasks``, pipelines read to resolve names), the file or
stdin, and the terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracker_client.protocol import Tracker
from worker.cli.ops.common import (
    EXIT_USAGE,
    OpsContext,
    OpsError,
    common_options,
    input_errors,
    resolve_pipeline,
)
from worker.cli.ops.task.fields import TaskFields, build_task, read_task_file, task_field_options

__all__ = ["task_add"]


@click.command("add")
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
