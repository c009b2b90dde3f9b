"""Checkpoints (extension ``checkpoints``): a run's one small JSON value, written by the run
(alone or with a heartbeat) and handed to the task's next claim as ``previous_checkpoint``.

Runs on the database thread inside the caller's transaction (a heartbeat's, a claim's); writes
``runs.checkpoint`` and the ``tasks.checkpointed`` flag only. A rail whose rows lack the flag
(no schema 7) reads as having no checkpoints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracker_client.agent_models import MAX_CHECKPOINT_BYTES
from tracker_client.errors import ValidationFailed
from tracker_client.rules.common import Ctx, dumps, stored_json

if TYPE_CHECKING:
    import sqlite3

__all__ = ["checkpoint_text", "previous_checkpoint", "write_checkpoint"]


def checkpoint_text(data: Any) -> str:
    """``data`` as compact JSON, or ``ValidationFailed`` naming what is wrong (not JSON, over
    :data:`MAX_CHECKPOINT_BYTES`)."""
    text = dumps(data, "checkpoint")
    size = len(text.encode())
    if size > MAX_CHECKPOINT_BYTES:
        raise ValidationFailed(
            f"checkpoint is too large: {size} bytes of JSON, limit {MAX_CHECKPOINT_BYTES} "
            "(64 KiB): keep a small resume note there, results in events and artifacts",
            code="checkpoint_too_large",
        )
    return text


def write_checkpoint(ctx: Ctx, task: sqlite3.Row, run_id: str, data: Any) -> None:
    """Replace the checkpoint of the leased ``run_id`` (of ``task``'s row) with ``data``."""
    text = checkpoint_text(data)
    ctx.exec("checkpoints.write", (text, run_id))
    if not task["checkpointed"]:
        ctx.exec("checkpoints.flag_task", (task["seq"],))


def previous_checkpoint(ctx: Ctx, task: sqlite3.Row, *, before_attempt: int | None = None) -> Any:
    """The latest checkpoint of ``task``'s runs (before attempt ``before_attempt``), or None.

    Only read when the task's row says a run wrote one: a claim of a task that never
    checkpointed costs nothing more.
    """
    try:
        flagged = task["checkpointed"]
    except (IndexError, KeyError):
        return None
    if not flagged:
        return None
    row = ctx.one(
        "checkpoints.latest",
        (task["id"], before_attempt if before_attempt is not None else 2**62),
    )
    if row is None:
        return None
    return stored_json(row["checkpoint"], "checkpoint", f"run {row['id']}")
