"""The answers of the operations around a task's life: what ``cancel``, ``requeue``,
``requeue_all``, a purge, a maintenance pass and a pipeline apply did, and what ``wait`` and
``follow_task`` saw.
Split from :mod:`tracker_client.models` (same base and rules: frozen, unknown fields ignored,
schemas built on first use). A maintenance pass's and a purge's answers are defined in
:mod:`tracker_client.maintenance_models` (a worker builds them without this module's cold
imports) and named here too.

Partly public (docs/reference/stability.md): what the producer API answers is on the Python
API reference; the rest is internal.
"""

from typing import Literal

from pydantic import Field

from tracker_client.maintenance_models import MaintenanceReport, PurgeResult
from tracker_client.models import Artifact, Event, TaskDetail, _Model

__all__ = [
    "CancelResult",
    "MaintenanceReport",
    "PipelinePlan",
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


class PipelinePlan(_Model):
    """What ``apply_pipeline`` did (``applied``), or ``diff_pipeline`` says it would do: a
    pipeline's new definition as a new version, its stage moves and the tasks concerned
    (docs/operate/pipelines.md)."""

    #: The pipeline's name (the file's).
    name: str
    #: Its id; None when the apply would create it (a diff of a new pipeline).
    pipeline_id: str | None = None
    #: The apply creates the pipeline (version 1).
    created: bool = False
    #: The definition is the current one and every move was applied before: nothing to do.
    unchanged: bool = False
    #: The apply wrote it (False for a diff, and for an unchanged apply).
    applied: bool = False
    #: The current version before the apply (None: no pipeline yet).
    from_version: int | None = None
    #: The version after the apply (the current one when unchanged).
    version: int = 1
    stages_added: list[str] = Field(default_factory=list)
    stages_removed: list[str] = Field(default_factory=list)
    #: One line per changed stage: ``"review: agent_role 'a' -> 'b'"``.
    stages_changed: list[str] = Field(default_factory=list)
    #: Transitions as ``from:trigger:to``.
    transitions_added: list[str] = Field(default_factory=list)
    transitions_removed: list[str] = Field(default_factory=list)
    #: One line per changed top-level setting (``retry``, ``initial``, ...).
    settings_changed: list[str] = Field(default_factory=list)
    #: The stage moves of this apply (old stage -> new stage).
    moves: dict[str, str] = Field(default_factory=dict)
    #: Per moved stage, how many of its tasks move now (running ones move when their run ends).
    tasks_moving: dict[str, int] = Field(default_factory=dict)
    #: Tasks not running that are brought to the new version now.
    tasks_updated: int = 0
    #: Running tasks that finish under the version they were claimed with.
    tasks_running: int = 0

    def changes(self) -> list[str]:
        """Every change as one short line, in a stable order (empty: unchanged)."""
        out: list[str] = []
        for label, items in (
            ("stage added", self.stages_added),
            ("stage removed", self.stages_removed),
            ("stage changed", self.stages_changed),
            ("transition added", self.transitions_added),
            ("transition removed", self.transitions_removed),
            ("setting changed", self.settings_changed),
        ):
            out += [f"{label}: {item}" for item in items]
        for old, new in self.moves.items():
            out.append(f"move: {old} -> {new} ({self.tasks_moving.get(old, 0)} task(s) now)")
        return out
