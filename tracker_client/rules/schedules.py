"""Periodic schedules stored in the rail (extension ``schedules``): a task on every cron tick.

A schedule is a row of ``schedules`` (schema 0003): a cron expression (5 fields, or 6 with
seconds first, parsed by ``cronsim``, DST rules included) read on the wall clock of an IANA time
zone (``zoneinfo``), the task it makes (pipeline, title, metadata, priority) and ``next_tick_ms``,
the earliest tick not fired yet.

Ticks are fired by maintenance (:meth:`~.rail.Rail.maintenance`, run by every worker's
maintenance loop and by ``tracker serve``'s rail when it serves ``POST /ops/maintenance``): one
write transaction (``BEGIN IMMEDIATE``, so one process at a time) inserts the due ticks' tasks and
advances ``next_tick_ms`` with a compare-and-set on its old value. Another pass, in this process
or any other, then finds nothing due: each tick makes exactly one task.

A tick is *missed* when the pass comes more than :data:`MISSED_AFTER_MS` after it (the rail was
down, or no worker ran). ``missed = "skip"``: no task for missed ticks, the schedule goes on at
its next future tick; ``"catch_up"``: exactly one task stands for all of them (metadata
``missed_ticks``), then the schedule goes on. Ticks less late than that each get their task.
Every task carries ``schedule``, ``scheduled_at`` (ISO 8601 in the schedule's zone) and
``scheduled_at_ms`` in its metadata.

This room touches the ``schedules`` table and creates tasks through :mod:`.tasks`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from tracker_client.errors import Conflict, NotFound, TrackerError, ValidationFailed
from tracker_client.rules import tasks
from tracker_client.rules.common import Ctx, dumps, stored_json
from tracker_client.validation import problems

if TYPE_CHECKING:
    import sqlite3

    from tracker_client.schedule_models import Schedule, ScheduleCreate

__all__ = [
    "MAX_COUNTED",
    "MAX_ON_TIME",
    "MISSED_AFTER_MS",
    "check",
    "create",
    "delete",
    "fire_due",
    "schedule_from_row",
    "schedule_row",
    "set_paused",
    "ticks_after",
]

#: A tick this much older than the maintenance pass that sees it is missed (policy applies).
MISSED_AFTER_MS = 60_000
#: On-time ticks one schedule fires per pass at most (the next pass goes on).
MAX_ON_TIME = 100
#: Missed ticks counted one by one for ``missed_ticks`` (beyond: the count says "at least").
MAX_COUNTED = 10_000


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidationFailed(f"timezone: unknown time zone {name!r}") from exc


def ticks_after(cron: str, zone: ZoneInfo, after_ms: int) -> Iterator[int]:
    """The ticks of ``cron`` on ``zone``'s wall clock strictly after ``after_ms``, as epoch ms."""
    # cronsim only where a schedule is read: ~0.6 MiB a worker on a rail without schedules
    # never loads (docs/benchmarks/memory.md)
    from cronsim import CronSim

    start = datetime.fromtimestamp(after_ms / 1000, zone)
    for tick in CronSim(cron, start):
        yield round(tick.timestamp() * 1000)


def check(fields: dict[str, Any], now_ms: int) -> tuple[ScheduleCreate, int]:
    """``fields`` as a :class:`ScheduleCreate` and its first tick after ``now_ms``; else
    ``ValidationFailed`` naming the field (cron, timezone, missed, an unknown key, ...)."""
    from tracker_client.schedule_models import ScheduleCreate  # where a schedule is (issue 31)

    try:
        spec = ScheduleCreate.model_validate(fields)
    except ValidationError as exc:
        first = problems(exc, ScheduleCreate)[0]
        raise ValidationFailed(f"{first.place()}: {first.message}") from exc
    zone = _zone(spec.timezone)
    from cronsim import CronSimError

    try:
        first_tick = next(ticks_after(spec.cron, zone, now_ms))
    except (CronSimError, StopIteration) as exc:
        raise ValidationFailed(f"cron: {spec.cron!r} is not a cron expression: {exc}") from exc
    dumps(spec.metadata, "metadata")
    return spec, first_tick


def schedule_from_row(row: sqlite3.Row) -> Schedule:
    """The :class:`Schedule` a ``schedules`` row stores."""
    from tracker_client.schedule_models import Schedule  # where a schedule is (issue 31)

    data = dict(row)
    data["metadata"] = stored_json(row["metadata"], "metadata", f"schedule {row['name']}")
    data["paused"] = bool(row["paused"])
    return Schedule.model_validate(data)


def schedule_row(ctx: Ctx, name: str) -> sqlite3.Row:
    """The ``schedules`` row of ``name``, or ``NotFound``."""
    row = ctx.one("schedules.get", (name,))
    if row is None:
        raise NotFound(f"schedule {name!r} not found", code="schedule_not_found")
    return row


def create(ctx: Ctx, fields: dict[str, Any]) -> Schedule:
    """Store a schedule (``replace``: update the one of that name); nothing is written on a
    bad field, an unknown pipeline or (without ``replace``) a taken name."""
    spec, first_tick = check(fields, ctx.now)
    if ctx.pipelines.get(ctx, spec.pipeline_id) is None:
        raise NotFound(
            f"pipeline_id: pipeline {spec.pipeline_id!r} not found", code="pipeline_not_found"
        )
    values = {
        "name": spec.schedule,
        "pipeline_id": spec.pipeline_id,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "title": spec.title,
        "metadata": dumps(spec.metadata, "metadata"),
        "priority": spec.priority,
        "missed": spec.missed,
        "next_tick_ms": first_tick,
        "now": ctx.now,
    }
    old = ctx.one("schedules.get", (spec.schedule,))
    if old is None:
        ctx.exec("schedules.insert", values)
    elif not spec.replace:
        raise Conflict(
            f"schedule: a schedule named {spec.schedule!r} exists", code="schedule_exists"
        )
    else:
        if (old["cron"], old["timezone"]) == (spec.cron, spec.timezone):
            values["next_tick_ms"] = old["next_tick_ms"]  # same ticks: none skipped or doubled
        ctx.exec("schedules.replace", values)
    return schedule_from_row(schedule_row(ctx, spec.schedule))


def set_paused(ctx: Ctx, name: str, paused: bool) -> Schedule:
    """Pause, or resume from the next tick after now (ticks while paused never fire)."""
    row = schedule_row(ctx, name)
    if bool(row["paused"]) != paused:
        next_tick = row["next_tick_ms"]
        if not paused:
            next_tick = next(ticks_after(row["cron"], _zone(row["timezone"]), ctx.now))
        ctx.exec("schedules.set_paused", (int(paused), next_tick, ctx.now, name))
    return schedule_from_row(schedule_row(ctx, name))


def delete(ctx: Ctx, name: str) -> Schedule:
    """Remove a schedule; the tasks it made stay."""
    gone = schedule_from_row(schedule_row(ctx, name))
    ctx.exec("schedules.delete", (name,))
    return gone


def _make_task(ctx: Ctx, row: sqlite3.Row, zone: ZoneInfo, tick: int, extra: dict[str, Any]) -> str:
    """One tick's task, in a savepoint: a refused task (backlog full, pipeline gone) is noted on
    the schedule and the tick passes (it never blocks the schedule nor the pass)."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import TaskCreate

    meta = dict(stored_json(row["metadata"], "metadata", f"schedule {row['name']}") or {})
    meta.update(
        schedule=row["name"],
        scheduled_at=datetime.fromtimestamp(tick / 1000, zone).isoformat(),
        scheduled_at_ms=tick,
        **extra,
    )
    spec = TaskCreate(
        pipeline_id=row["pipeline_id"], title=row["title"], priority=row["priority"], metadata=meta
    )
    ctx.exec("schedules.tick_begin")
    try:
        task_id = tasks.create_tasks(ctx, [spec], bulk=False)[0]
    except TrackerError as exc:
        ctx.exec("schedules.tick_undo")
        ctx.exec("schedules.tick_end")
        ctx.exec("schedules.tick_failed", (str(exc), row["name"]))
        return ""
    ctx.exec("schedules.tick_end")
    ctx.exec("schedules.tick_made", (tick, task_id, row["name"]))
    return task_id


def _fire(ctx: Ctx, row: sqlite3.Row) -> int:
    """Fire one schedule's due ticks; returns the tasks created."""
    zone, cron, old = _zone(row["timezone"]), row["cron"], int(row["next_tick_ms"])
    edge, due, made = ctx.now - MISSED_AFTER_MS, old, 0
    if due < edge:  # missed ticks: count them (bounded), then apply the policy
        counted, ticks = 1, ticks_after(cron, zone, due)
        due = next(ticks)
        while due < edge and counted < MAX_COUNTED:
            counted, due = counted + 1, next(ticks)
        if due < edge:
            due = next(ticks_after(cron, zone, edge - 1))
        if row["missed"] == "catch_up":
            extra = {"missed_ticks": counted, "caught_up": True}
            made += bool(_make_task(ctx, row, zone, old, extra))
    ticks = ticks_after(cron, zone, due)
    fired = 0
    while due <= ctx.now and fired < MAX_ON_TIME:
        made += bool(_make_task(ctx, row, zone, due, {}))
        fired, due = fired + 1, next(ticks)
    cur = ctx.exec("schedules.advance", (due, ctx.now, row["name"], old))
    if cur.rowcount != 1:  # never under BEGIN IMMEDIATE; if it were, nothing is committed
        raise Conflict(f"schedule {row['name']!r}: its tick moved under this pass")
    return made


def fire_due(ctx: Ctx) -> int:
    """Fire every unpaused schedule's due ticks (one write transaction); tasks created."""
    rows = ctx.all("schedules.due", (ctx.now,))
    if not rows:
        return 0
    from cronsim import CronSimError  # see ticks_after

    made = 0
    for row in rows:
        ctx.exec("schedules.fire_begin")
        try:
            made += _fire(ctx, row)
            ctx.exec("schedules.fire_end")
        except (CronSimError, ValidationFailed, StopIteration) as exc:
            ctx.exec("schedules.fire_undo")
            ctx.exec("schedules.fire_end")
            # A stored cron or zone this build cannot read (a tzdata or cronsim change): the
            # schedule is paused with the reason, instead of failing every maintenance pass.
            ctx.exec(
                "schedules.pause_broken",
                (f"paused: cannot compute its ticks: {exc}", ctx.now, row["name"]),
            )
    return made
