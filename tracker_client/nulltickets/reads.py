"""Reads the other parts build on, with the server's paging quirks absorbed.

* NullTickets' ``next_cursor`` skips one item per page: the cursor handed back is rebuilt from
  the page's last item (``<created_at_ms>:<id>`` for tasks and artifacts, the id for events);
* ``list_runs`` is an extension: a plain server gives only the task's latest run;
* a listed task's ``listed`` state is an extension (``list_state``), kept only when listed;
* ``queue_stats`` without a window uses a third of the default lease TTL;
* ``get_task`` is also the read-back of ``fail``, ``transition``, ``add_artifact`` and ``wait``.

Functions of a :class:`~tracker_client.nulltickets.wire.Wire`; may touch nothing else.
"""

from __future__ import annotations

from typing import Any

from tracker_client.models import Artifact, Event, Page, QueueStats, Run, Task, TaskDetail
from tracker_client.nulltickets.wire import Wire

__all__ = [
    "get_task",
    "item_cursor",
    "list_artifacts",
    "list_events",
    "list_runs",
    "list_task_events",
    "list_tasks",
    "queue_stats",
]

#: A worker's default lease TTL: the near-expiry window of ``queue_stats`` is a third of it.
DEFAULT_LEASE_TTL_MS = 60_000


def item_cursor(page: Page[Any], kind: str) -> str | None:
    """A cursor built from the last item (the server's own ``next_cursor`` skips an item)."""
    if page.next_cursor is None or not page.items:
        return None
    last = page.items[-1]
    return str(last.id) if kind == "event" else f"{last.created_at_ms}:{last.id}"


async def get_task(wire: Wire, task_id: str) -> TaskDetail:
    """``GET /tasks/{task_id}``: the task with its latest run and relations."""
    return await wire.call("get_task", task_id, into=TaskDetail)


async def list_tasks(
    wire: Wire, stage: str | None, pipeline_id: str | None, limit: int, cursor: str | None
) -> Page[Task]:
    """One page of tasks; the cursor rebuilt from the last item (no task skipped). Each task's
    ``listed`` state is kept only from a server that lists extension ``list_state`` (None
    otherwise: the caller reads an open task whole, as on NullTickets)."""
    query = {"stage": stage, "pipeline_id": pipeline_id, "limit": limit, "cursor": cursor}
    page = await wire.call("list_tasks", query=query, into=Page[Task])
    items = page.items
    if any(t.listed is not None for t in items) and not await wire.discovery.has("list_state"):
        items = [t.model_copy(update={"listed": None}) for t in items]
    return Page[Task](items=items, next_cursor=item_cursor(page, "task"))


async def list_artifacts(
    wire: Wire, task_id: str | None, run_id: str | None, limit: int, cursor: str | None
) -> Page[Artifact]:
    """One page of artifacts; the cursor rebuilt from the last item."""
    query = {"task_id": task_id, "run_id": run_id, "limit": limit, "cursor": cursor}
    page = await wire.call("list_artifacts", query=query, into=Page[Artifact])
    return Page[Artifact](items=page.items, next_cursor=item_cursor(page, "artifact"))


async def list_events(wire: Wire, run_id: str, limit: int, cursor: str | None) -> Page[Event]:
    """One page of a run's events; the cursor rebuilt from the last item."""
    query = {"limit": limit, "cursor": cursor}
    page = await wire.call("list_events", run_id, query=query, into=Page[Event])
    return Page[Event](items=page.items, next_cursor=item_cursor(page, "event"))


async def list_task_events(
    wire: Wire, task_id: str, limit: int, cursor: str | None, kind: str | None
) -> Page[Event]:
    """One page of a task's events (extension ``task_events``); the cursor is the last id."""
    query = {"limit": limit, "cursor": cursor, "kind": kind}
    page = await wire.call("list_task_events", task_id, query=query, into=Page[Event])
    return Page[Event](items=page.items, next_cursor=item_cursor(page, "event"))


async def list_runs(wire: Wire, task_id: str) -> list[Run]:
    """Every run of the task (extension ``runs``); only the latest run on NullTickets."""
    if await wire.discovery.has("runs"):
        return await wire.call("list_runs", task_id, into=list[Run])
    detail = await get_task(wire, task_id)
    return [detail.latest_run] if detail.latest_run is not None else []


async def queue_stats(wire: Wire, near_expiry_ms: int | None, stuck_ms: int) -> QueueStats:
    """Per-role queue figures; ``near_expiry_ms=None`` sends a third of the default lease TTL
    (the API takes one window and does not expose each lease's TTL)."""
    if near_expiry_ms is None:
        near_expiry_ms = DEFAULT_LEASE_TTL_MS // 3
    query = {"near_expiry_ms": near_expiry_ms, "stuck_ms": stuck_ms}
    return await wire.call("queue_stats", query=query, into=QueueStats)
