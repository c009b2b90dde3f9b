"""``backlog-worker task requeue``: bring a dead-lettered or cancelled task back to work.

One task by id (into the stage it was dead-lettered at, or ``--stage``), or with
``--dead-lettered`` every dead-lettered task of a pipeline, narrowed by ``--reason`` and
``--since`` and previewed with ``--dry-run`` (the rail's ``requeue_all`` operation). The retry
budget restarts unless ``--keep-attempts``. The flags are checked before any tracker is opened
(:class:`DeadLetterReplay`). It may touch the tracker (``requeue``, ``requeue_all``, pipelines
read to resolve a name) and the terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from tracker_client import calls
from tracker_client.errors import NotFound, Unsupported
from tracker_client.protocol import Tracker
from worker.cli.ops.common import (
    EXIT_USAGE,
    DurationType,
    OpsContext,
    OpsError,
    common_options,
    input_errors,
    resolve_pipeline,
)

__all__ = ["DeadLetterReplay", "dead_letter_replay_options", "task_requeue"]

F = TypeVar("F", bound=Callable[..., Any])

_DURATION = DurationType()


def dead_letter_replay_options(func: F) -> F:
    """Add the bulk-replay flags of ``task requeue`` (``--dead-lettered``, ``--pipeline``, ...)."""
    options = [
        click.option(
            "--dead-lettered",
            is_flag=True,
            help="Requeue every dead-lettered task of --pipeline instead of one TASK_ID.",
        ),
        click.option("--pipeline", "-p", metavar="NAME|ID", help="With --dead-lettered."),
        click.option(
            "--reason",
            metavar="REASON",
            help="Only tasks dead-lettered for this reason (max_attempts_exceeded, "
            "permanent_failure, crash_loop, expired, cancelled, ...).",
        ),
        click.option(
            "--since",
            type=_DURATION,
            help="Only tasks dead-lettered within this long ago (e.g. 1h, 30m, 2d).",
        ),
        click.option(
            "--dry-run", is_flag=True, help="Print how many would be requeued; write nothing."
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@dataclass(frozen=True)
class DeadLetterReplay:
    """The bulk-replay flags of one ``task requeue`` invocation."""

    dead_lettered: bool = False
    pipeline: str | None = None
    reason: str | None = None
    since: float | None = None
    dry_run: bool = False

    @classmethod
    def pop_from(cls, kwargs: dict[str, Any]) -> DeadLetterReplay:
        """Take this class's fields out of a click kwargs dict."""
        names = cls.__dataclass_fields__
        return cls(**{k: kwargs.pop(k) for k in list(kwargs) if k in names})

    def check(self, task_id: str | None) -> None:
        """``OpsError`` (usage) for a combination that cannot mean anything, before any I/O."""
        if not self.dead_lettered:
            given = [
                flag
                for flag, value in (
                    ("--pipeline", self.pipeline),
                    ("--reason", self.reason),
                    ("--since", self.since),
                    ("--dry-run", self.dry_run or None),
                )
                if value is not None
            ]
            if given:
                raise OpsError(
                    f"{given[0]} applies only with --dead-lettered (bulk replay of a pipeline)",
                    EXIT_USAGE,
                )
            if task_id is None:
                raise OpsError(
                    "missing TASK_ID (or --dead-lettered --pipeline NAME|ID)", EXIT_USAGE
                )
            return
        if task_id is not None:
            raise OpsError("give a TASK_ID or --dead-lettered, not both", EXIT_USAGE)
        if not self.pipeline:
            raise OpsError("--dead-lettered needs --pipeline NAME|ID", EXIT_USAGE)
        if self.reason is not None and not self.reason.strip():
            raise OpsError("--reason is empty", EXIT_USAGE)
        if self.since is not None and self.since * 1000 < 1:
            raise OpsError(f"--since must be longer than 0 (got {self.since:g}s)", EXIT_USAGE)

    def since_ms(self) -> int | None:
        """``--since`` in milliseconds (None: no age limit)."""
        return None if self.since is None else int(self.since * 1000)


@click.command("requeue", short_help="Requeue a dead-lettered task, or every one of a pipeline.")
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
