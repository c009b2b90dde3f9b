"""``backlog-worker task show``: a task's state, runs, events timeline, artifacts and spans.

The spans are the OTLP spans ingested for the task (``POST /v1/traces``, linked to it by their
``nulltickets.task_id`` / ``nulltickets.run_id`` attributes), listed through the ``spans``
extension and shown as a tree under their parents. On a rail without that extension (a plain
NullTickets server stores spans but cannot list them) nothing more is printed and ``--json`` has
no ``spans`` key. ``--follow`` then streams the task's new events (:mod:`.follow`).

It may touch the tracker (reads only: the task, its pipeline, runs, events, artifacts and spans)
and the terminal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import RenderableType
from rich.table import Table

from tracker_client import calls
from tracker_client.agents import parent_of
from tracker_client.errors import NotFound, Unsupported
from tracker_client.models import Artifact, Event, Pipeline, Run, TaskDetail
from tracker_client.observe_models import Span
from tracker_client.protocol import Tracker
from tracker_client.task_states import dead_letter_note
from worker.cli.ops.common import (
    OpsContext,
    OpsError,
    common_options,
    fmt_age,
    fmt_ms,
    fmt_when,
    input_errors,
    now_ms,
)
from worker.cli.ops.outcome import short_json
from worker.cli.ops.task.follow import Follow, follow_options

__all__ = [
    "TaskReport",
    "event_summary",
    "fetch_report",
    "fetch_spans",
    "fmt_span_duration",
    "left_out",
    "render_artifacts",
    "render_events",
    "render_spans",
    "render_task",
    "short_json",
    "span_depths",
    "task_show",
]


def event_summary(kind: str, data: Any) -> str:
    """A readable one-liner for an event's data (the JSON stays available with ``--json``)."""
    if not isinstance(data, dict):
        return short_json(data)
    if kind == "transition" and {"trigger", "from", "to"} <= data.keys():
        note = f" ({data['instructions']})" if data.get("instructions") else ""
        return f"{data['trigger']}: {data['from']} -> {data['to']}{note}"
    if kind == "retry_scheduled" and "retry_delay_ms" in data:
        failed = data.get("failed_attempts", "?")
        return f"failure #{failed}; retry in {fmt_age(data['retry_delay_ms'])}"
    if kind in ("dead_letter", "cancelled") and "reason" in data:
        where = f" -> {data['dead_letter_stage']}" if data.get("dead_letter_stage") else ""
        loop = ""
        if "stale_runs" in data and "max_stale_attempts" in data:
            of = "the rail's" if data.get("limit_of") == "rail" else "the task's"
            loop = (
                f"; {data['stale_runs']} lease expiries in a row, {of} "
                f"max_stale_attempts {data['max_stale_attempts']}"
            )
        if "budget_exceeded" in data:  # budgets: the figures (docs/operate/budgets.md)
            loop = f"; {data['budget_exceeded']}"
        return f"{data['reason']} (from {data.get('from_stage', '?')}{where}{loop})"
    parts = []
    for key, value in data.items():
        if value is None or value == "" or value == {} or value == []:
            continue  # noise in a one-liner
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        parts.append(f"{key}={short_json(text.strip(), 80)}")
    return short_json(" ".join(parts), 240)


class TaskReport:
    """Everything ``task show`` prints about one task."""

    def __init__(
        self,
        task: TaskDetail,
        runs: list[Run],
        events: list[Event],
        artifacts: list[Artifact],
        pipeline: Pipeline | None,
        spans: list[Span] | None = None,
    ) -> None:
        self.task = task
        self.runs = runs
        self.events = events
        self.artifacts = artifacts
        self.pipeline = pipeline
        #: None: the rail has no ``spans`` extension (nothing is shown of them).
        self.spans = spans

    def as_json(self) -> dict[str, Any]:
        """The JSON shape of ``task show --json``."""
        shape = {
            "task": self.task.model_dump(mode="json"),
            "runs": [r.model_dump(mode="json") for r in self.runs],
            "events": [e.model_dump(mode="json") for e in self.events],
            "artifacts": [a.model_dump(mode="json") for a in self.artifacts],
        }
        if self.spans is not None:
            shape["spans"] = [s.model_dump(mode="json") for s in self.spans]
        return shape


async def _all_task_events(tracker: Tracker, task: TaskDetail, runs: list[Run]) -> list[Event]:
    events: list[Event] = []
    cursor: str | None = None
    try:
        while True:
            page = await tracker.list_task_events(task.id, limit=1000, cursor=cursor)
            events.extend(page.items)
            if page.next_cursor is None or not page.items:
                return events
            cursor = str(page.items[-1].id)
    except Unsupported:
        pass
    # A tracker without task-level event listing: read each known run's events.
    events = []
    for run in runs:
        cursor = None
        while True:
            page_r = await tracker.list_events(run.id, limit=1000, cursor=cursor)
            events.extend(page_r.items)
            if page_r.next_cursor is None or not page_r.items:
                break
            cursor = str(page_r.items[-1].id)
    return sorted(events, key=lambda e: e.id)


async def _all_artifacts(tracker: Tracker, task_id: str) -> list[Artifact]:
    items: list[Artifact] = []
    cursor: str | None = None
    while True:
        page = await tracker.list_artifacts(task_id=task_id, limit=1000, cursor=cursor)
        items.extend(page.items)
        if page.next_cursor is None or not page.items:
            return items
        last = page.items[-1]
        cursor = f"{last.created_at_ms}:{last.id}"


async def fetch_report(tracker: Tracker, task_id: str) -> TaskReport:
    """Read a task and its runs, events and artifacts; ``OpsError`` for an unknown task."""
    try:
        task = await tracker.get_task(task_id)
    except NotFound:
        raise OpsError(f"unknown task {task_id!r}") from None
    runs = await tracker.list_runs(task_id)
    events = await _all_task_events(tracker, task, runs)
    artifacts = await _all_artifacts(tracker, task_id)
    try:
        pipeline: Pipeline | None = await tracker.get_pipeline(task.pipeline_id)
    except NotFound:
        pipeline = None
    spans = await fetch_spans(tracker, task_id)
    return TaskReport(task, runs, events, artifacts, pipeline, spans)


def _is_terminal(pipeline: Pipeline | None, stage: str) -> bool:
    if pipeline is None:
        return False
    state = (pipeline.definition.get("states") or {}).get(stage)
    return isinstance(state, dict) and bool(state.get("terminal"))


def describe_state(task: TaskDetail, pipeline: Pipeline | None) -> str:
    """Where the task is in its life: done, dead-lettered, running, waiting, retry pending."""
    if task.dead_letter_reason:
        note = dead_letter_note(task)
        return f"dead-lettered ({task.dead_letter_reason}" + (f": {note})" if note else ")")
    if _is_terminal(pipeline, task.stage):
        return "done"
    run = task.latest_run
    if run is not None and run.status == "running":
        return f"running (attempt {run.attempt}, agent {run.agent_id})"
    now = now_ms()
    if task.next_eligible_at_ms > now and task.run_at_ms is not None and task.run_at_ms > now:
        return f"scheduled for {fmt_ms(task.next_eligible_at_ms)}"
    if task.next_eligible_at_ms > now:
        return f"waiting for retry at {fmt_ms(task.next_eligible_at_ms)}"
    blocked = [d.depends_on_task_id for d in task.dependencies if not d.resolved]
    if blocked:
        return f"waiting on {len(blocked)} dependenc{'y' if len(blocked) == 1 else 'ies'}"
    return "waiting"


def left_out(shown: int, total: int, what: str, flag: str) -> str | None:
    """The line saying how many earlier ``what`` were not shown, or None when none were."""
    hidden = total - shown
    if hidden <= 0:
        return None
    return f"{hidden} earlier {what} not shown ({flag} N, or --all)"


def render_task(report: TaskReport, *, last_runs: int = 0) -> list[RenderableType]:
    """The summary grid and the runs table of a task (the ``last_runs`` latest; 0 = all)."""
    task = report.task
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    rows: list[tuple[str, str]] = [
        ("task", task.id),
        ("title", task.title),
        ("pipeline", report.pipeline.name if report.pipeline else task.pipeline_id),
        ("stage", task.stage),
        ("state", describe_state(task, report.pipeline)),
        ("priority", str(task.priority)),
        ("version", str(task.task_version)),
        ("max attempts", "unlimited" if task.max_attempts is None else str(task.max_attempts)),
        ("retry delay", fmt_age(task.retry_delay_ms)),
    ]
    if task.budget is not None:  # budgets (docs/operate/budgets.md)
        rows += [(f"budget: {k}", v) for k, v in task.budget.rows()]
    if task.max_stale_attempts is not None or task.stale_streak:
        limit = "rail's" if task.max_stale_attempts is None else str(task.max_stale_attempts)
        rows.append(("lease expiries", f"{task.stale_streak} in a row (crash-loop limit {limit})"))
    if task.description:
        rows.append(("description", short_json(task.description, 400)))
    if task.metadata not in ({}, None):
        rows.append(("metadata", short_json(task.metadata, 400)))
    if task.dead_letter_stage:
        rows.append(("dead-letter stage", task.dead_letter_stage))
    if task.concurrency_key:
        rows.append(("concurrency key", task.concurrency_key))
    if task.expires_at_ms:
        rows.append(("expires", fmt_ms(task.expires_at_ms)))
    if task.run_at_ms is not None:
        rows.append(("scheduled for", fmt_ms(task.run_at_ms)))
    if task.dedupe_key:
        rows.append(("dedupe key", task.dedupe_key))
    if (parent := parent_of(task)) is not None:
        rows.append(("parent", parent))
    for dep in task.dependencies:
        resolved = "done" if dep.resolved else "open"
        rows.append(("depends on", f"{dep.depends_on_task_id} ({resolved})"))
    for a in task.assignments:
        if a.active:
            by = f" by {a.assigned_by}" if a.assigned_by else ""
            rows.append(("assigned to", a.agent_id + by))
    if task.available_transitions:
        rows.append(
            ("next", ", ".join(f"{t.trigger} -> {t.to}" for t in task.available_transitions))
        )
    rows += [("created", fmt_ms(task.created_at_ms)), ("updated", fmt_ms(task.updated_at_ms))]
    for key, value in rows:
        grid.add_row(key, value)
    out: list[RenderableType] = [grid]
    if report.runs:
        shown = report.runs[-last_runs:] if last_runs > 0 else report.runs
        title = "runs"
        if len(shown) < len(report.runs):
            title = f"runs (last {len(shown)} of {len(report.runs)})"
        runs = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1))
        for col in ("#", "status", "agent", "role", "started", "took"):
            runs.add_column(col, no_wrap=True)
        runs.add_column("error", overflow="fold", ratio=1)
        for r in shown:
            took = fmt_age(r.ended_at_ms - r.started_at_ms) if r.ended_at_ms else "-"
            runs.add_row(
                str(r.attempt),
                r.status,
                r.agent_id,
                r.agent_role,
                fmt_when(r.started_at_ms),
                took,
                short_json(r.error or "", 160),
            )
        out.append(runs)
        note = left_out(len(shown), len(report.runs), "runs", "--runs")
        if note is not None:
            out.append(note)
    return out


def render_events(events: list[Event], runs: list[Run], *, last: int) -> Table:
    """The events timeline (the ``last`` most recent)."""
    attempt = {r.id: r.attempt for r in runs}
    shown = events[-last:] if last > 0 else events
    title = "events"
    if len(shown) < len(events):
        title = f"events (last {len(shown)} of {len(events)})"
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1))
    for col in ("time", "run", "kind"):
        table.add_column(col, no_wrap=True)
    table.add_column("data", overflow="fold", ratio=1)
    for e in shown:
        run = f"#{attempt[e.run_id]}" if e.run_id in attempt else ("-" if e.run_id is None else "?")
        table.add_row(fmt_when(e.ts_ms), run, e.kind, event_summary(e.kind, e.data))
    return table


def render_artifacts(artifacts: list[Artifact]) -> Table:
    """The artifacts table."""
    table = Table(title="artifacts", box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1))
    table.add_column("kind", no_wrap=True)
    table.add_column("uri", overflow="fold", ratio=1)
    for col in ("size", "sha256", "created"):
        table.add_column(col, no_wrap=True)
    for a in artifacts:
        table.add_row(
            a.kind,
            a.uri,
            "-" if a.size_bytes is None else str(a.size_bytes),
            (a.sha256 or "-")[:16],
            fmt_when(a.created_at_ms),
        )
    return table


# -- spans ----------------------------------------------------------------------------------------
#: Deepest indentation of a child span under its parent in the table.
_MAX_INDENT = 8
_SPAN_STATUS = {0: "-", 1: "ok", 2: "error"}


async def fetch_spans(tracker: Tracker, task_id: str) -> list[Span] | None:
    """The task's spans by start time, or None when the rail has no ``spans`` extension."""
    if "spans" not in (await tracker.capabilities()).extensions:
        return None
    try:
        spans = await calls.LIST_SPANS.call(tracker, task_id)
    except Unsupported:
        return None
    return spans


def fmt_span_duration(span: Span) -> str:
    """How long the span took (``850us``, ``12.5ms``, ``4.2s``), ``-`` without both ends."""
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if start is None or end is None:
        return "-"
    ns = max(0, end - start)
    if ns < 1_000_000:
        return f"{ns // 1000}us"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.1f}ms"
    return fmt_age(ns // 1_000_000)


def span_depths(spans: list[Span]) -> dict[str, int]:
    """Each span's depth under its ancestors among ``spans`` (a root, or a span whose parent
    is not shown, is 0), by ``trace_id:span_id``."""
    by_id = {f"{s.trace_id}:{s.span_id}": s for s in spans}
    depths: dict[str, int] = {}
    for key, span in by_id.items():
        depth, seen, parent = 0, {key}, span.parent_span_id
        while parent is not None and depth < _MAX_INDENT:
            up = f"{span.trace_id}:{parent}"
            if up in seen or up not in by_id:
                break
            seen.add(up)
            depth += 1
            parent = by_id[up].parent_span_id
        depths[key] = depth
    return depths


def render_spans(spans: list[Span], runs: list[Run]) -> Table:
    """The spans table: start, name (indented under its parent), duration, status, run."""
    attempt = {r.id: r.attempt for r in runs}
    depths = span_depths(spans)
    table = Table(title="spans", box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1))
    table.add_column("start", no_wrap=True)
    table.add_column("name", overflow="fold", ratio=1)
    for col in ("took", "status", "run"):
        table.add_column(col, no_wrap=True)
    for s in spans:
        start = None if s.start_time_unix_nano is None else s.start_time_unix_nano // 1_000_000
        status = _SPAN_STATUS.get(s.status_code or 0, str(s.status_code))
        if s.status_message:
            status = f"{status}: {s.status_message}"
        run = "-" if s.run_id is None else (f"#{attempt[s.run_id]}" if s.run_id in attempt else "?")
        indent = "  " * depths.get(f"{s.trace_id}:{s.span_id}", 0)
        table.add_row(fmt_when(start), indent + s.name, fmt_span_duration(s), status, run)
    return table


@click.command("show")
@click.argument("task_id")
@click.option(
    "--events",
    "last_events",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="How many of the latest events to show (0 = all).",
)
@click.option(
    "--runs",
    "last_runs",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="How many of the latest runs to show (0 = all).",
)
@click.option("--all", "show_all", is_flag=True, help="Every run and every event.")
@follow_options
@common_options
def task_show(
    task_id: str,
    last_events: int,
    last_runs: int,
    show_all: bool,
    follow: bool,
    poll_interval: float | None,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Show a task: state, the latest runs and events, and artifacts (--json: all of them);
    with --follow, then its new events until it finishes."""
    ops = OpsContext.build(tracker_url, config_path, as_json)
    with input_errors():
        following = Follow.checked(task_id, follow, poll_interval, summary=event_summary)

    async def show(tracker: Tracker) -> int:
        report = await fetch_report(tracker, task_id)
        if ops.as_json:
            ops.emit_json(report.as_json(), compact=follow)  # --follow: JSON lines
            return await following.run(ops, tracker, report.runs, report.events)
        runs, events = (0, 0) if show_all else (last_runs, last_events)
        ops.print(*render_task(report, last_runs=runs))
        if report.events:
            ops.print(render_events(report.events, report.runs, last=events))
            shown = min(events, len(report.events)) if events > 0 else len(report.events)
            note = left_out(shown, len(report.events), "events", "--events")
            if note is not None:
                ops.print(note)
        if report.artifacts:
            ops.print(render_artifacts(report.artifacts))
        if report.spans:
            ops.print(render_spans(report.spans, report.runs))
        return await following.run(ops, tracker, report.runs, report.events)

    ops.run(show, interrupted=following.interrupted)
