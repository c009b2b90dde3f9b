"""``backlog-worker task cancel ID`` and ``task cancel-all``: stop tasks by hand.

A cancelled task is unclaimable at once and a running one loses its lease (the worker holding
it stops at its next heartbeat). ``cancel-all`` cancels every open task of a pipeline and/or
role, after a confirmation (``--yes`` where stdin is no terminal). It may touch the tracker
(``cancel``, ``cancel_all``, pipelines read to resolve a name) and the terminal.
"""

from __future__ import annotations

from pathlib import Path

import click

from tracker_client.errors import NotFound
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

__all__ = ["task_cancel", "task_cancel_all"]


@click.command("cancel", short_help="Cancel a task (a running one loses its lease).")
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


@click.command("cancel-all", short_help="Cancel every open task of a pipeline or role.")
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
