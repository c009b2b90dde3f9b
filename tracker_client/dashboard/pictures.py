"""The dashboard's picture pages: each pipeline as its state machine with live counts per
stage, and a task among its relations (parent, dependencies, subtasks).

Both are drawn on the server as inline SVG (:mod:`~tracker_client.dashboard.svg`), from the
rail's own reads: ``list_pipelines`` and ``count_tasks`` (extension ``count``; without it the
boxes carry no counts), ``get_task`` and a bounded scan of ``list_tasks`` for subtasks (the rail
has no listing of a task's children: the page says how many tasks it read).

It may touch the tracker (reads only).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial

from starlette.requests import Request
from starlette.responses import Response

from tracker_client.dashboard import svg
from tracker_client.dashboard.auth import Viewer
from tracker_client.dashboard.data import Catalog, optional
from tracker_client.dashboard.state import BadParam, Dashboard
from tracker_client.errors import NotFound, TrackerRejected
from tracker_client.models import Task, TaskDetail
from tracker_client.protocol import Tracker

__all__ = ["CHILD_SCAN", "Picture", "pipelines_page", "relations"]

#: Most tasks read (created after the task) to find its subtasks.
CHILD_SCAN = 1000

#: Most boxes drawn on one side of a task (dependencies, subtasks).
MAX_SIDE = 12


@dataclass(frozen=True)
class Picture:
    """One pipeline's picture: its name, its graph and its task count (None: not counted)."""

    name: str
    graph: svg.Graph
    total: int | None


async def pipelines_page(request: Request, dash: Dashboard, viewer: Viewer) -> Response:
    """Every pipeline as its state machine, with the tasks in each stage now."""
    if request.query_params.get("refresh") not in (None, "", "on", "off"):
        raise BadParam("refresh", "not one of on, off")
    catalog = await Catalog.read(dash.tracker)
    pictures = []
    counted = True
    for p in sorted(catalog.pipelines.values(), key=lambda p: p.name):
        counts: dict[str, int | None] = {}
        for stage in p.definition.get("states") or {}:
            counts[stage] = await optional(partial(_count, dash.tracker, stage, p.id))
        known = [c for c in counts.values() if c is not None]
        counted = counted and len(known) == len(counts)
        total = sum(known) if len(known) == len(counts) else None
        pictures.append(Picture(p.name, svg.pipeline(p.definition, counts), total))
    context = {"pictures": pictures, "counted": counted}
    return dash.render(
        request, viewer, "pipelines.html", context, refresh=True, section="pipelines"
    )


async def _count(tracker: Tracker, stage: str, pipeline_id: str) -> int:
    """The tasks in ``stage`` of the pipeline now (``count_tasks``, extension ``count``)."""
    return int(await tracker.call("count_tasks", stage=stage, pipeline_id=pipeline_id))


def _box(task: Task, root: str, catalog: Catalog, kind: str = "") -> svg.Node:
    state = "dead" if task.dead_letter_reason else ""
    return svg.Node(
        0,
        0,
        task.title or task.id,
        f"{catalog.name(task.pipeline_id)} / {task.stage}",
        kind
        or state
        or ("terminal" if catalog.stage(task.pipeline_id, task.stage).get("terminal") else "role"),
        f"{root}/tasks/{task.id}",
    )


async def _children(tracker: Tracker, task: Task) -> tuple[list[Task], int, bool]:
    """Subtasks of ``task`` among the :data:`CHILD_SCAN` tasks created after it (from its own
    place in the listing when the rail takes it as a cursor, else from the first task): the
    children, how many tasks were read, and whether the scan stopped at its bound."""
    found: list[Task] = []
    read = 0
    cursor: str | None = f"{task.created_at_ms}:{task.id}"
    try:
        page = await tracker.list_tasks(limit=200, cursor=cursor)
    except TrackerRejected:  # another rail's cursor: read from the start
        page = await tracker.list_tasks(limit=200)
    while True:
        read += len(page.items)
        found.extend(t for t in page.items if t.parent_id == task.id)
        if page.next_cursor is None:
            return found, read, False
        if read >= CHILD_SCAN:
            return found, read, True
        page = await tracker.list_tasks(limit=200, cursor=page.next_cursor)


@dataclass(frozen=True)
class Relations:
    """A task's relations picture and what its children scan read."""

    graph: svg.Graph
    read: int
    cut: bool
    more: int


async def relations(
    tracker: Tracker, detail: TaskDetail, catalog: Catalog, root: str
) -> Relations | None:
    """The task among its parent, dependencies and subtasks (None: it has none of them)."""
    up: list[svg.Node] = []
    if detail.parent_id:
        with contextlib.suppress(NotFound):
            up.append(_box(await tracker.get_task(detail.parent_id), root, catalog))
    left = []
    for dep in detail.dependencies[:MAX_SIDE]:
        try:
            left.append(_box(await tracker.get_task(dep.depends_on_task_id), root, catalog))
        except NotFound:
            continue
    children, read, cut = await _children(tracker, detail)
    right = [_box(c, root, catalog) for c in children[:MAX_SIDE]]
    if not (up or left or right):
        return None
    more = max(0, len(detail.dependencies) - MAX_SIDE) + max(0, len(children) - MAX_SIDE)
    center = svg.Node(0, 0, detail.title or detail.id, f"this task · {detail.stage}", "task")
    return Relations(svg.relations(center, up, left, right), read, cut, more)
