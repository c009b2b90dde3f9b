"""Following one task's events as they are written (extension ``follow``).

``follow_task`` answers the task's events after a cursor (an event id) as soon as there is at
least one, or the task is finished, or ``timeout_ms`` passes (then with no events): the long poll
behind ``backlog-worker task show ID --follow`` and ``GET /tasks/{task_id}/follow``.

It sleeps on wake-ups, not on a short polling loop (``Rail.follow_task``): every write of this
tracker instance (an event, a claim, a transition, a cancel) sets the followers' event
(:class:`~.engine.Changes`), and a write of another process is seen by the engine's
:meth:`~.engine.Engine.follow` (SQLite: the same ``PRAGMA data_version`` check ``wait`` uses,
gated by the WAL file's stat; PostgreSQL: a NOTIFY on the follow channel). The events and the
task's state are read in one read transaction, so an answer saying ``finished`` holds every
event written before the end.

This room reads ``events``, ``runs`` and ``tasks``; it writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.rules import reads
from tracker_client.rules.common import Ctx

if TYPE_CHECKING:
    from tracker_client.ops_models import TaskFollow

__all__ = ["MAX_FOLLOW_MS", "check_follow", "follow_state"]

#: Longest single ``follow_task`` wait (a follower asks again).
MAX_FOLLOW_MS = 60_000


def check_follow(timeout_ms: object, limit: object) -> None:
    """``ValidationFailed`` for a ``follow_task`` timeout or limit out of range."""
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int):
        raise ValidationFailed(f"timeout_ms must be an integer, got {timeout_ms!r}")
    if not 0 <= timeout_ms <= MAX_FOLLOW_MS:
        raise ValidationFailed(f"timeout_ms must be 0..{MAX_FOLLOW_MS}, got {timeout_ms}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ValidationFailed(f"limit must be 1..1000, got {limit!r}", code="invalid_limit")


def follow_state(ctx: Ctx, task_id: str, after: str | None, limit: int) -> TaskFollow:
    """The events of ``task_id`` after ``after`` and its state, read in one transaction.

    ``finished`` only when the task is finished and no event is left after this page.
    ``NotFound`` for an unknown task, ``ValidationFailed`` for a cursor that is no event id.
    """
    from tracker_client.ops_models import TaskFollow  # a follower's call (issue 31)

    row = ctx.one("follow.state", (task_id,))
    if row is None:
        raise NotFound(f"task {task_id} not found", code="not_found")
    page = reads.list_events(ctx, "task_id", task_id, limit, after)
    reason = row["dead_letter_reason"]
    if reason is not None:
        outcome = reason if reason in ("cancelled", "expired") else "dead_lettered"
    elif ctx.pipeline(row["pipeline_id"]).is_terminal(row["stage"]):
        outcome = "done"
    else:
        outcome = "pending"
    cursor = str(page.items[-1].id) if page.items else (after or "0")
    return TaskFollow(
        events=page.items,
        next_cursor=cursor,
        finished=outcome != "pending" and page.next_cursor is None,
        outcome=outcome,
        stage=row["stage"],
    )
