"""``backlog-worker purge --older-than 7d [--dry-run] [--pipeline P]``: delete old finished tasks.

The operator's face of the tracker's ``purge`` extension operation (embedded and served rails;
a plain NullTickets server answers ``Unsupported``). It may touch the tracker (``purge``, and
the pipeline list to resolve ``--pipeline``) and the terminal; the age is checked before the
tracker is opened, so a bad ``--older-than`` writes nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from tracker_client import calls
from tracker_client.ops_models import PurgeResult
from tracker_client.protocol import Tracker
from worker.cli.ops.common import (
    EXIT_USAGE,
    OpsContext,
    OpsError,
    common_options,
    fmt_ms,
    input_errors,
    resolve_pipeline,
)

__all__ = ["MAX_AGE_MS", "parse_age", "purge_command"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
#: The largest age accepted: 100 years (the tracker's own bound).
MAX_AGE_MS = 100 * 366 * 86_400_000


def parse_age(text: str) -> int:
    """``7d``, ``12h``, ``90m``, ``2w``, ... as milliseconds; ``OpsError`` naming
    ``--older-than`` for a negative, zero, unit-less, unreadable or absurd age."""
    raw = text.strip()
    if raw.startswith("-"):
        raise OpsError(f"--older-than: must be positive, got {text!r}", EXIT_USAGE)
    match = _AGE.match(raw)
    if match is None:
        raise OpsError(
            f"--older-than: {text!r} is not an age with a unit (e.g. 7d, 12h, 90m, 2w)",
            EXIT_USAGE,
        )
    ms = float(match.group(1)) * _UNIT_MS[match.group(2)]
    if ms < 1:
        raise OpsError(
            f"--older-than: must be more than 0 (0 would purge what just finished), got {text!r}",
            EXIT_USAGE,
        )
    if ms > MAX_AGE_MS:
        raise OpsError(f"--older-than: at most 100 years, got {text!r}", EXIT_USAGE)
    return int(ms)


def _summary(result: PurgeResult) -> str:
    verb = "would purge" if result.dry_run else "purged"
    line = (
        f"{verb} {result.tasks} finished task(s) last updated before {fmt_ms(result.cutoff_ms)}"
        f" ({result.runs} run(s), {result.events} event(s), {result.artifacts} artifact "
        "record(s))"
    )
    if not result.dry_run and result.pages_freed:
        line += f"; gave {result.pages_freed} page(s) back to the file system"
    return line


@click.command("purge", short_help="Delete finished tasks older than an age (--dry-run counts).")
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="AGE",
    help="Finished tasks last updated longer ago than this (e.g. 7d, 12h, 2w).",
)
@click.option("--dry-run", is_flag=True, help="Only count what would be purged; write nothing.")
@click.option("--pipeline", "-p", metavar="NAME|ID", help="Only this pipeline's tasks.")
@common_options
def purge_command(
    older_than: str,
    dry_run: bool,
    pipeline: str | None,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Delete finished tasks (terminal, dead-lettered, cancelled) older than --older-than, with
    their runs, events and artifact records, in small batches; the file then shrinks.

    Waiting and running tasks, and a finished task an unfinished one depends on, are never
    purged. Maintenance does the same on its own for tasks older than the rail's
    retention_days (30 by default).

    \b
    backlog-worker purge --older-than 7d --dry-run
    backlog-worker purge --older-than 30d --pipeline review
    """
    ops = OpsContext.build(tracker_url, config_path, as_json)
    with input_errors():
        age_ms = parse_age(older_than)

    async def run(tracker: Tracker) -> int:
        pipeline_id = (await resolve_pipeline(tracker, pipeline)).id if pipeline else None
        result = await calls.PURGE.call(
            tracker, older_than_ms=age_ms, dry_run=dry_run, pipeline_id=pipeline_id
        )
        if ops.as_json:
            ops.emit_json(result)
        else:
            ops.print(_summary(result))
        return 0

    ops.run(run)
