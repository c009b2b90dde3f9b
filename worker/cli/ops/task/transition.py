"""``backlog-worker task transition ID TRIGGER``: move a task waiting at a human step by hand.

A human step is a pipeline stage with no role (marked ``"human": true``): no worker claims a
task there, a person moves it on. The move has a worker transition's optimistic checks: the
expected stage (by default the task's stage read first, so a move by someone else in between is
refused) and, with ``--instructions``, instructions that reach the next run as a worker's
would (``ctx.instructions``). It may touch the tracker (``get_task``, ``transition_task``
through :func:`tracker_client.agents.transition_task`) and the terminal.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracker_client import agents
from tracker_client.errors import NotFound
from tracker_client.protocol import Tracker
from worker.cli.ops.common import EXIT_USAGE, OpsContext, OpsError, common_options, input_errors

__all__ = ["task_transition"]

#: The largest instructions file read (the rail refuses more than 1 MiB anyway).
MAX_INSTRUCTIONS_BYTES = 1024 * 1024


def _read_instructions(text: str | None, path: Path | None) -> str | None:
    """The instructions from ``--instructions`` or ``--instructions-file`` (``-``: stdin)."""
    if text is not None and path is not None:
        raise OpsError("give --instructions or --instructions-file, not both", EXIT_USAGE)
    if path is None:
        return text
    try:
        raw = (
            sys.stdin.buffer.read(MAX_INSTRUCTIONS_BYTES + 1)
            if str(path) == "-"
            else path.read_bytes()
        )
    except OSError as exc:
        raise OpsError(f"--instructions-file {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    if len(raw) > MAX_INSTRUCTIONS_BYTES:
        raise OpsError(
            f"--instructions-file {path}: over {MAX_INSTRUCTIONS_BYTES} bytes", EXIT_USAGE
        )
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise OpsError(f"--instructions-file {path}: not UTF-8 text", EXIT_USAGE) from None


@click.command("transition", short_help="Move a task waiting at a human step (a role-less stage).")
@click.argument("task_id")
@click.argument("trigger")
@click.option(
    "--expected-stage",
    metavar="STAGE",
    help="Refuse unless the task is still in STAGE (default: its stage, read first).",
)
@click.option("--instructions", metavar="TEXT", help="Instructions for the next stage's run.")
@click.option(
    "--instructions-file",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    help="Read the instructions from a file ('-' = stdin).",
)
@common_options
def task_transition(
    task_id: str,
    trigger: str,
    expected_stage: str | None,
    instructions: str | None,
    instructions_file: Path | None,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Move task TASK_ID, waiting at a human step, along TRIGGER.

    Only a task in a stage with no role and no running lease moves so; the next stage's run
    reads the instructions. Exit 1 when the task moved meanwhile (stale --expected-stage), is
    not at a human step, or TRIGGER is not allowed there (the allowed ones are listed).

    \b
    backlog-worker task transition 7f3c... approve
    backlog-worker task transition 7f3c... reject --instructions "cite the sources"
    """
    ops = OpsContext.build(tracker_url, config_path, as_json)
    with input_errors():
        text = _read_instructions(instructions, instructions_file)

    async def move(tracker: Tracker) -> int:
        try:
            result = await agents.transition_task(
                tracker, task_id, trigger, expected_stage=expected_stage, instructions=text
            )
        except NotFound as exc:
            if exc.code in ("not_found", "task_not_found"):
                raise OpsError(f"unknown task {task_id!r}") from None
            raise
        if ops.as_json:
            ops.emit_json(result)
        else:
            ops.print(
                f"task {task_id} {result.previous_stage} -> {result.new_stage} ({result.trigger})"
            )
        return 0

    ops.run(move)
