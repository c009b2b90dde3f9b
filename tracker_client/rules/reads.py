"""Events and artifacts: listing with correct cursors, and recording artifacts.

Runs on the database thread inside a transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.models import Artifact, ArtifactCreate
from tracker_client.rules.common import (
    MIB,
    Ctx,
    artifact_from_row,
    check_limit,
    dumps,
    event_from_row,
    new_id,
)
from tracker_client.rules.tasks import page_by_creation

if TYPE_CHECKING:
    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import Event, Page

__all__ = ["add_artifact", "list_artifacts", "list_events"]


def _event_cursor(cursor: str) -> int:
    try:
        value = int(cursor)
    except (TypeError, ValueError):
        value = -1
    if not 0 <= value < 2**63 or not isinstance(cursor, str) or not cursor.strip().isdigit():
        raise ValidationFailed(
            f"invalid cursor {cursor!r}: expected an event id", code="invalid_cursor"
        )
    return value


def list_events(
    ctx: Ctx, column: str, value: str, limit: int, cursor: str | None, kind: str | None = None
) -> Page[Event]:
    """Events of a run (``column="run_id"``) or a task (``"task_id"``) in id order, optionally
    only those of one ``kind``."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import Event, Page

    check_limit(limit)
    if kind is not None and (not isinstance(kind, str) or not kind):
        raise ValidationFailed("event kind filter must be a non-empty string", code="invalid_kind")
    after = _event_cursor(cursor) if cursor is not None else 0
    rows = ctx.all(
        "reads.run_events" if column == "run_id" else "reads.task_events",
        {"of": value, "after": after, "limit": limit + 1, "kind": kind},
    )
    items = [event_from_row(r) for r in rows[:limit]]
    nxt = str(items[-1].id) if len(rows) > limit and items else None
    return Page[Event](items=items, next_cursor=nxt)


def add_artifact(ctx: Ctx, art: ArtifactCreate) -> str:
    """Record an artifact; unknown task or run ids are ``NotFound``."""
    if not isinstance(art.kind, str) or not art.kind:
        raise ValidationFailed("artifact kind must be a non-empty string")
    if not isinstance(art.uri, str) or not art.uri:
        raise ValidationFailed("artifact uri must be a non-empty string")
    if art.task_id is not None and ctx.one("tasks.exists", (art.task_id,)) is None:
        raise NotFound(f"artifact: task {art.task_id} not found", code="task_not_found")
    if art.run_id is not None:
        run = ctx.one("reads.run_exists", (art.run_id,))
        if run is None:
            raise NotFound(f"artifact: run {art.run_id} not found", code="run_not_found")
    if art.size_bytes is not None and (
        isinstance(art.size_bytes, bool) or not 0 <= art.size_bytes < 2**63
    ):
        raise ValidationFailed(f"artifact size_bytes must be >= 0, got {art.size_bytes!r}")
    meta = dumps(art.meta, "artifact meta", max_bytes=MIB)
    aid = new_id()
    ctx.exec(
        "reads.add_artifact",
        (
            aid,
            art.task_id,
            art.run_id,
            ctx.now,
            art.kind,
            art.uri,
            art.sha256,
            art.size_bytes,
            meta,
        ),
    )
    return aid


#: The artifact page statement by (a task given, a run given): each filter set its own
#: statement, so each keeps its index (``artifacts_task``, ``artifacts_run``, creation order).
_ARTIFACT_PAGES = {
    (False, False): "reads.artifacts_page",
    (True, False): "reads.artifacts_page_by_task",
    (False, True): "reads.artifacts_page_by_run",
    (True, True): "reads.artifacts_page_by_task_run",
}


def list_artifacts(
    ctx: Ctx, task_id: str | None, run_id: str | None, limit: int, cursor: str | None
) -> Page[Artifact]:
    """Artifacts in creation order, optionally of one task and/or run."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import Page

    page = _ARTIFACT_PAGES[task_id is not None, run_id is not None]
    items, nxt = page_by_creation(
        ctx,
        page,
        "reads.artifact_seq",
        {"task_id": task_id, "run_id": run_id},
        limit,
        cursor,
        artifact_from_row,
    )
    return Page[Artifact](items=items, next_cursor=nxt)
