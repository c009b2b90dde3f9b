"""The dashboard's read pages: the queue, the task list, one task, workers, schedules and limits.

Each handler reads what its page shows through the ``Tracker`` protocol and renders one
template; query parameters are checked first, and a bad one is a ``400`` page naming it
(:class:`~tracker_client.dashboard.app.BadParam`) before anything is read. An extension the rail
lacks renders as "not available on this rail" (:func:`~tracker_client.dashboard.data.optional`).

It may touch the tracker (reads only) and the templates.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response

from tracker_client import calls
from tracker_client.dashboard import pictures, svg
from tracker_client.dashboard.auth import Viewer
from tracker_client.dashboard.data import (
    STATES,
    Attempts,
    Catalog,
    ListedTask,
    Search,
    fresh_state,
    last_requeue,
    optional,
    task_state,
)
from tracker_client.dashboard.state import BadParam, Dashboard
from tracker_client.errors import TrackerRejected
from tracker_client.models import Event, Page, Run, Task
from tracker_client.task_states import dead_letter_note

__all__ = ["queue_page", "schedules_page", "task_page", "tasks_page", "workers_page"]

#: The largest page of the task list, and the most tasks one filtered page reads.
MAX_LIMIT = 200
MAX_SCAN = 2000

#: Longest search text.
MAX_WORDS = 200

#: Events shown per page of a task's timeline.
EVENTS_PER_PAGE = 200

#: Longest accepted text parameter (a stage, a pipeline, a cursor).
MAX_PARAM = 500


def _param(request: Request, name: str, choices: tuple[str, ...] | None = None) -> str | None:
    """The query parameter ``name`` (None when absent or empty), checked against ``choices``."""
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if len(value) > MAX_PARAM:
        raise BadParam(name, f"longer than {MAX_PARAM} characters")
    if choices is not None and value not in choices:
        raise BadParam(name, f"{value!r} is not one of {', '.join(choices)}")
    return value


def _refresh(request: Request) -> None:
    _param(request, "refresh", ("on", "off"))


def _limit(request: Request) -> int:
    raw = _param(request, "limit")
    if raw is None:
        return 50
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise BadParam("limit", f"{raw!r} is not a whole number from 1 to {MAX_LIMIT}")
    return int(raw)


async def queue_page(request: Request, dash: Dashboard, viewer: Viewer) -> Response:
    """Per role: waiting, running, scheduled, retrying, dead-lettered, oldest wait; the census of
    stages; the fleet-wide rate limits when the rail has them."""
    _refresh(request)
    stats = await dash.tracker.queue_stats()
    health = await dash.tracker.health()
    limits = await optional(lambda: calls.LIST_RATE_LIMITS.call(dash.tracker))
    context = {"stats": stats, "health": health, "limits": limits}
    return dash.render(request, viewer, "queue.html", context, refresh=True, section="queue")


async def tasks_page(request: Request, dash: Dashboard, viewer: Viewer) -> Response:
    """Tasks in creation order, filtered by pipeline, stage, role and state, and searched for
    words (title, description, metadata, optionally events), a page at a time.

    The rail filters by pipeline and stage; the rest is a filter of its pages here, reading
    at most :data:`MAX_SCAN` tasks per page of results (the page says how many it read, and
    ``Next page`` goes on from there).
    """
    _refresh(request)
    state = _param(request, "state", STATES)
    limit = _limit(request)
    cursor = _param(request, "cursor")
    pipeline_ref = _param(request, "pipeline")
    stage = _param(request, "stage")
    role = _param(request, "role")
    words = _param(request, "q")
    in_events = _param(request, "events", ("on",)) is not None
    if words is not None and len(words) > MAX_WORDS:
        raise BadParam("q", f"longer than {MAX_WORDS} characters")
    catalog = await Catalog.read(dash.tracker)
    pipeline = catalog.find(pipeline_ref) if pipeline_ref else None
    if pipeline_ref and pipeline is None:
        known = ", ".join(sorted(p.name for p in catalog.pipelines.values())) or "none"
        raise BadParam("pipeline", f"unknown pipeline {pipeline_ref!r} (known: {known})")
    stages = catalog.stages(pipeline.id if pipeline else None)
    if stage is not None and stage not in stages:
        raise BadParam("stage", f"unknown stage {stage!r} (known: {', '.join(stages) or 'none'})")
    roles = catalog.roles()
    if role is not None and role not in roles:
        raise BadParam("role", f"unknown role {role!r} (known: {', '.join(roles) or 'none'})")
    search = Search.of(words, in_events)
    scanning = state is not None or role is not None or search is not None
    rows: list[ListedTask] = []
    scanned, next_cursor = 0, cursor
    while True:
        try:
            listing: Page[Task] = await dash.tracker.list_tasks(
                stage=stage,
                pipeline_id=pipeline.id if pipeline else None,
                limit=limit,
                cursor=next_cursor,
            )
        except TrackerRejected as exc:
            raise BadParam("cursor", str(exc)) from None
        scanned += len(listing.items)
        for task in listing.items:
            if search is not None and not await search.matches(dash.tracker, task):
                continue
            row = await ListedTask.read(dash.tracker, task, catalog)
            if (state is None or row.state == state) and (role is None or row.role == role):
                rows.append(row)
        next_cursor = listing.next_cursor
        if not scanning or len(rows) >= limit or next_cursor is None or scanned >= MAX_SCAN:
            break
    filters = {
        "pipeline": pipeline.name if pipeline else "",
        "stage": stage or "",
        "state": state or "",
        "role": role or "",
        "q": words or "",
        "events": "on" if in_events else "",
        "limit": limit,
    }
    kept = {k: v for k, v in filters.items() if v != ""}
    if request.query_params.get("refresh") == "off":
        kept["refresh"] = "off"
    context = {
        "rows": rows,
        "filters": filters,
        "query": urlencode(kept),
        "next_cursor": next_cursor,
        "first_page": cursor is None,
        "scanned": scanned if scanning else None,
        "max_scan": MAX_SCAN,
        "pipelines": sorted(p.name for p in catalog.pipelines.values()),
        "stages": stages,
        "roles": roles,
        "states": STATES,
    }
    return dash.render(request, viewer, "tasks.html", context, refresh=True, section="tasks")


async def _timeline(dash: Dashboard, task_id: str, runs: list[Run], cursor: str | None) -> Any:
    """The task's events (one page) and the next page's cursor; from each run when the rail
    cannot list a task's events at once (no paging then)."""
    try:
        page: Page[Event] | None = await optional(
            lambda: dash.tracker.list_task_events(task_id, limit=EVENTS_PER_PAGE, cursor=cursor)
        )
    except TrackerRejected as exc:
        raise BadParam("events_cursor", str(exc)) from None
    if page is not None:
        return page.items, page.next_cursor
    events: list[Event] = []
    for run in runs:
        events.extend((await dash.tracker.list_events(run.id, limit=EVENTS_PER_PAGE)).items)
    return sorted(events, key=lambda e: (e.ts_ms, e.id)), None


async def task_page(request: Request, dash: Dashboard, viewer: Viewer) -> Response:
    """One task: its fields, runs, event timeline, artifacts and spans, and (for an authorised
    viewer) the cancel and requeue buttons its state allows."""
    task_id = request.path_params["task_id"]
    _refresh(request)
    cursor = _param(request, "events_cursor")
    detail = await dash.tracker.get_task(task_id)  # NotFound: the 404 page
    catalog = await Catalog.read(dash.tracker)
    runs = await optional(lambda: dash.tracker.list_runs(task_id))
    if runs is None:
        runs = [detail.latest_run] if detail.latest_run else []
    events, next_events = await _timeline(dash, task_id, runs, cursor)
    artifacts = (await dash.tracker.list_artifacts(task_id=task_id, limit=200)).items
    spans = await optional(lambda: calls.LIST_SPANS.call(dash.tracker, task_id))
    requeue = await last_requeue(dash.tracker, task_id)
    state = task_state(detail, catalog.stage(detail.pipeline_id, detail.stage), detail)
    state = fresh_state(state, detail.latest_run, requeue)
    context = {
        "task": detail,
        "pipeline": catalog.name(detail.pipeline_id),
        "state": state,
        "dead_note": dead_letter_note(detail),  # a crash loop's count and knob
        "runs": runs,
        "attempts": Attempts.of(detail, runs, requeue),
        "events": events,
        "next_events": next_events,
        "artifacts": artifacts,
        "spans": spans,
        "timeline": svg.timeline(detail.created_at_ms, runs, events, int(time.time() * 1000)),
        "live_src": _live_src(request, task_id, events, next_events, state),
        "relations": await pictures.relations(
            dash.tracker, detail, catalog, request.scope.get("root_path", "")
        ),
        "human_step": state == "waiting"
        and catalog.is_human_step(detail.pipeline_id, detail.stage),
        "can_cancel": state in ("waiting", "running", "failed"),
        "can_requeue": state == "dead",
        "stages": catalog.stages(detail.pipeline_id),
    }
    live = context["live_src"] is not None
    # A task waiting for a person does not reload itself: it would lose the typed instructions.
    refresh = live and not context["human_step"]
    return dash.render(
        request, viewer, "task.html", context, section="tasks", refresh=refresh, live=live
    )


def _live_src(
    request: Request, task_id: str, events: list[Event], more: str | None, state: str
) -> str | None:
    """The stream the page's script follows (None: the task is finished, or this is not the
    last page of its events)."""
    if state in ("dead", "done") or more is not None:
        return None
    root = request.scope.get("root_path", "")
    after = f"?after={events[-1].id}" if events else ""
    return f"{root}/tasks/{quote(task_id, safe='')}/stream{after}"


async def workers_page(request: Request, dash: Dashboard, viewer: Viewer) -> Response:
    """The workers registered in the rail: alive, lost or stopped, and what each runs now."""
    _refresh(request)
    workers = await optional(lambda: calls.LIST_WORKERS.call(dash.tracker))
    return dash.render(
        request, viewer, "workers.html", {"workers": workers}, refresh=True, section="workers"
    )


async def schedules_page(request: Request, dash: Dashboard, viewer: Viewer) -> Response:
    """The rail's periodic schedules and its fleet-wide rate limits, when it has them."""
    _refresh(request)
    schedules = await optional(lambda: calls.LIST_SCHEDULES.call(dash.tracker))
    limits = await optional(lambda: calls.LIST_RATE_LIMITS.call(dash.tracker))
    catalog = await Catalog.read(dash.tracker)
    names = {p.id: p.name for p in catalog.pipelines.values()}  # names, not ids
    context = {"schedules": schedules, "limits": limits, "pipelines": names}
    return dash.render(
        request, viewer, "schedules.html", context, refresh=True, section="schedules"
    )
