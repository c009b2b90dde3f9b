"""``backlog-worker schedule add|list|show|pause|resume|remove``: periodic tasks in the rail.

The operator's face of the tracker's ``schedules`` extension (embedded and served rails; a plain
NullTickets server answers ``Unsupported``). The cron expression, time zone, missed-tick policy
and metadata are checked before the tracker is opened, so a bad flag writes nothing; the
pipeline (name or id) is resolved on the rail. It may touch the tracker (the schedule operations
and the pipeline list) and the terminal.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table

from tracker_client import calls
from tracker_client.errors import (
    ConfigError,
    NotFound,
    TrackerError,
    Unsupported,
    ValidationFailed,
)
from tracker_client.protocol import Tracker
from tracker_client.rules.schedules import check
from tracker_client.schedule_models import Schedule
from worker.cli.ops.common import (
    EXIT_USAGE,
    OpsContext,
    OpsError,
    common_options,
    fmt_ms,
    input_errors,
    now_ms,
    resolve_pipeline,
)
from worker.cli.ops.input import parse_json_flag
from worker.config.models import ScheduleConfig

__all__ = ["declare_schedules", "reload_schedules", "schedule_fields", "schedule_group"]

log = logging.getLogger("backlog_worker.cli")


@click.group("schedule")
def schedule_group() -> None:
    """Periodic tasks stored in the rail: a task of a pipeline on every cron tick.

    Ticks are fired by the workers' maintenance loop (and a served rail's maintenance), each
    tick exactly once however many workers run.
    """


def schedule_fields(
    name: str,
    cron: str,
    timezone: str,
    title: str,
    metadata: Any,
    priority: int,
    missed: str,
) -> dict[str, Any]:
    """The ``create_schedule`` fields (``pipeline_id`` still to fill in), checked as the rail
    checks them; ``OpsError`` naming the flag (``--cron``, ``--timezone``, ...)."""
    fields: dict[str, Any] = {"schedule": name, "pipeline_id": "-", "cron": cron}
    fields.update(timezone=timezone, title=title, metadata=metadata, priority=priority)
    fields["missed"] = missed
    try:
        check(fields, now_ms())
    except ValidationFailed as exc:
        message = str(exc)
        flag = "NAME" if message.startswith("schedule") else "--" + message.split(":", 1)[0]
        raise OpsError(f"{flag}: {message.split(': ', 1)[-1]}", EXIT_USAGE) from None
    return fields


async def declare_schedules(tracker: Tracker, declared: Sequence[ScheduleConfig]) -> None:
    """Store the config's ``[[schedules]]`` in the rail at worker start: each created, or
    updated by name (its next tick kept when cron and zone are unchanged; a pause set with
    ``schedule pause`` stays). ``ConfigError`` names the table of an unknown pipeline (found
    before anything is written), a refused field, or a rail without the ``schedules``
    extension."""
    pipelines: list[str] = []
    for n, item in enumerate(declared, start=1):  # every pipeline known before any write
        try:
            pipelines.append((await resolve_pipeline(tracker, item.pipeline)).id)
        except (OpsError, NotFound) as exc:
            raise ConfigError(f"[[schedules]] #{n} ({item.name}): {exc}") from None
    for n, (item, pipeline) in enumerate(zip(declared, pipelines, strict=True), start=1):
        where = f"[[schedules]] #{n} ({item.name})"
        try:
            await calls.CREATE_SCHEDULE.call(
                tracker,
                schedule=item.name,
                pipeline_id=pipeline,
                cron=item.cron,
                timezone=item.timezone,
                title=item.title,
                metadata=dict(item.metadata),
                priority=item.priority,
                missed=item.missed,
                replace=True,
            )
        except (OpsError, ValidationFailed, NotFound) as exc:
            raise ConfigError(f"{where}: {exc}") from None
        except Unsupported as exc:
            raise ConfigError(f"{where}: this rail has no schedules ({exc})") from None


async def reload_schedules(
    tracker: Tracker, running: Sequence[ScheduleConfig], fresh: Sequence[ScheduleConfig]
) -> bool:
    """Store a reloaded config's ``[[schedules]]`` as :func:`declare_schedules` does at start
    (an unchanged schedule keeps its next tick and its pause). A schedule no longer declared
    stays in the rail and is named in the log with the command that removes it. False (the
    error logged, naming the table) when the rail refused one or could not be reached: the
    caller keeps the running set, so the next reload tries again."""
    try:
        await declare_schedules(tracker, fresh)
    except (ConfigError, TrackerError) as exc:
        log.error("reload: [[schedules]] not stored: %s", exc, extra={"action": "reload_failed"})
        return False
    kept = {item.name for item in fresh}
    for item in running:
        if item.name not in kept:
            log.warning(
                "reload: schedule %s is no longer in the config; it stays in the rail and "
                "keeps firing (backlog-worker schedule remove %s)",
                item.name,
                item.name,
                extra={"action": "reload_schedule_kept", "schedule": item.name},
            )
    log.info("reload: [[schedules]] stored (%d)", len(fresh), extra={"action": "reload_schedules"})
    return True


def _table(schedules: list[Schedule]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("name", "cron", "timezone", "pipeline", "state", "next tick", "tasks"):
        table.add_column(column)
    for s in schedules:
        state = "paused" if s.paused else "active"
        table.add_row(
            s.name,
            s.cron,
            s.timezone,
            s.pipeline_id,
            state,
            "-" if s.paused else fmt_ms(s.next_tick_ms),
            str(s.tasks_created),
        )
    return table


def _show(ops: OpsContext, schedule: Schedule, verb: str = "") -> None:
    if ops.as_json:
        ops.emit_json(schedule)
        return
    if verb:
        ops.print(f"{verb} schedule {schedule.name}")
    rows = [
        ("cron", f"{schedule.cron} ({schedule.timezone})"),
        ("pipeline", schedule.pipeline_id),
        ("title", schedule.title),
        ("missed ticks", schedule.missed),
        ("state", "paused" if schedule.paused else "active"),
        ("next tick", "-" if schedule.paused else fmt_ms(schedule.next_tick_ms)),
        ("last tick", fmt_ms(schedule.last_tick_ms)),
        ("last task", schedule.last_task_id or "-"),
        ("tasks created", str(schedule.tasks_created)),
    ]
    if schedule.last_error:
        rows.append(("last error", schedule.last_error))
    for key, value in rows:
        ops.print(f"  {key:<14}{value}")


@schedule_group.command("add")
@click.argument("name")
@click.option("--pipeline", "-p", required=True, metavar="NAME|ID", help="The tasks' pipeline.")
@click.option(
    "--cron",
    required=True,
    help='Cron expression: 5 fields ("0 3 * * *"), or 6 with seconds first ("*/10 * * * * *").',
)
@click.option("--timezone", "timezone", default="UTC", show_default=True, help="IANA zone.")
@click.option("--title", required=True, help="Each task's title.")
@click.option("--metadata", "-m", metavar="JSON", help="Each task's metadata (a JSON object).")
@click.option("--priority", type=int, default=0, show_default=True)
@click.option(
    "--missed",
    type=click.Choice(["skip", "catch_up"]),
    default="skip",
    show_default=True,
    help="Ticks missed while nothing ran: skip them, or one task for all of them.",
)
@common_options
def add(
    name: str,
    pipeline: str,
    cron: str,
    timezone: str,
    title: str,
    metadata: str | None,
    priority: int,
    missed: str,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Store schedule NAME: a task of --pipeline on every tick of --cron.

    \b
    backlog-worker schedule add nightly --pipeline review --cron "0 3 * * *" \\
        --timezone Europe/Paris --title "Nightly review" --metadata '{"scope": "all"}'
    """
    ops = OpsContext.build(tracker_url, config_path, as_json)
    with input_errors():
        meta = parse_json_flag(metadata, "--metadata") if metadata is not None else {}
        if not isinstance(meta, dict):
            raise OpsError("--metadata: must be a JSON object", EXIT_USAGE)
        fields = schedule_fields(name, cron, timezone, title, meta, priority, missed)

    async def run(tracker: Tracker) -> int:
        fields["pipeline_id"] = (await resolve_pipeline(tracker, pipeline)).id
        _show(ops, await calls.CREATE_SCHEDULE.call(tracker, **fields), "added")
        return 0

    ops.run(run)


@schedule_group.command("list")
@common_options
def list_(tracker_url: str | None, config_path: Path | None, as_json: bool) -> None:
    """Every schedule, by name, with its next tick."""
    ops = OpsContext.build(tracker_url, config_path, as_json)

    async def run(tracker: Tracker) -> int:
        schedules = await calls.LIST_SCHEDULES.call(tracker)
        ops.emit_list(schedules, _table, "no schedules")
        return 0

    ops.run(run)


def _one(command_name: str, operation: calls.Op[Schedule], verb: str, help_: str) -> click.Command:
    """A ``schedule COMMAND NAME`` that calls ``operation`` on the rail and shows the answer."""

    @common_options
    def command(
        name: str, tracker_url: str | None, config_path: Path | None, as_json: bool
    ) -> None:
        ops = OpsContext.build(tracker_url, config_path, as_json)

        async def run(tracker: Tracker) -> int:
            _show(ops, await operation.call(tracker, name), verb)
            return 0

        ops.run(run)

    return click.command(command_name, help=help_)(click.argument("name")(command))


for _command in (
    _one(
        "show", calls.GET_SCHEDULE, "", "Show schedule NAME: its cron, next and last tick, tasks."
    ),
    _one(
        "pause", calls.PAUSE_SCHEDULE, "paused", "Pause schedule NAME: no ticks fire until resumed."
    ),
    _one(
        "resume",
        calls.RESUME_SCHEDULE,
        "resumed",
        "Resume schedule NAME from its next future tick (ticks while paused are not caught up).",
    ),
    _one(
        "remove", calls.DELETE_SCHEDULE, "removed", "Remove schedule NAME (the tasks it made stay)."
    ),
):
    schedule_group.add_command(_command)
