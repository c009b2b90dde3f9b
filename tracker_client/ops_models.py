"""The answers of the operations around a task's life: what ``cancel``, ``requeue``,
``requeue_all``, a purge and a maintenance pass did, and what ``wait`` and ``follow_task`` saw.
Split from :mod:`tracker_client.models` (same base and rules: frozen, unknown fields ignored,
schemas built on first use).

Partly public (docs/reference/stability.md): what the producer API answers is on the Python
API reference; the rest is internal.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tracker_client.models import Artifact, Event, TaskDetail, _Model

__all__ = [
    "CancelResult",
    "MaintenanceReport",
    "PurgeResult",
    "RequeueAllResult",
    "RequeueResult",
    "TaskFollow",
    "WaitResult",
]


class CancelResult(_Model):
    """What ``cancel`` did: the task's stage after it, and whether a live lease was revoked."""

    task_id: str
    stage: str
    revoked_lease: bool
    dead_letter_reason: str = "cancelled"
    #: Unfinished descendants (subtasks) cancelled with it, in the same write.
    cancelled_descendants: int = 0


class RequeueResult(_Model):
    """What ``requeue`` did."""

    task_id: str
    stage: str
    task_version: int
    reset_attempts: bool


class RequeueAllResult(_Model):
    """What ``requeue_all`` did to a pipeline's dead letters (or, with ``dry_run``, would do).

    ``requeued`` counts the tasks brought back (on a dry run: that match, nothing written);
    ``by_reason`` splits it by dead-letter reason; ``batches`` is how many write transactions
    it took (0 on a dry run): a long replay never holds the write lock for long.
    """

    pipeline_id: str
    requeued: int
    by_reason: dict[str, int] = Field(default_factory=dict)
    dry_run: bool = False
    batches: int = 0


class PurgeResult(_Model):
    """What a purge of finished tasks did (or, ``dry_run``, would do): rows per table."""

    tasks: int = 0
    runs: int = 0
    events: int = 0
    artifacts: int = 0
    idempotency_keys: int = 0
    #: Database pages given back to the file system (0 without incremental auto-vacuum).
    pages_freed: int = 0
    #: Tasks last updated before this time (epoch ms) were purged.
    cutoff_ms: int = 0
    dry_run: bool = False


class MaintenanceReport(_Model):
    """What one maintenance pass did."""

    expired_leases: int = 0
    crash_looped: int = 0
    #: Waiting tasks dead-lettered ``expired`` (their dependents, dead-lettered
    #: ``upstream_dead_lettered`` in the same pass, are not counted).
    expired_tasks: int = 0
    purged_idempotency_keys: int = 0
    #: Finished tasks purged by retention in this pass (the embedded option ``retention_days``).
    purged_tasks: int = 0
    #: Tasks created by schedule ticks in this pass (extension ``schedules``).
    scheduled_tasks: int = 0


class WaitResult(_Model):
    """The answer to ``wait``: ``finished`` is False on timeout (the task may still finish).

    ``outcome`` is ``"done"`` (terminal stage), ``"dead_lettered"``, ``"cancelled"``, ``"expired"``,
    or ``"pending"`` on timeout.
    """

    finished: bool
    outcome: Literal["done", "dead_lettered", "cancelled", "expired", "pending"]
    task: TaskDetail
    artifacts: list[Artifact] = Field(default_factory=list)
    result_event: Event | None = None


class TaskFollow(_Model):
    """The answer to ``follow_task`` (extension ``follow``): the task's events after the cursor
    (oldest first), the cursor to go on from, and whether the task is finished.

    ``finished`` is True only once no event is left to read and the task is finished
    (``outcome`` as in :class:`WaitResult`; ``"pending"`` while it goes on).
    """

    events: list[Event] = Field(default_factory=list)
    #: The id of the last event answered (or the cursor given, ``"0"`` for none): pass it back.
    next_cursor: str
    finished: bool
    outcome: Literal["done", "dead_lettered", "cancelled", "expired", "pending"]
    stage: str
