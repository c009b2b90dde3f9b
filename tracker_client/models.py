"""Typed models of the tracker's data, named exactly as the NullTickets JSON names them.

One set of models serves both trackers: the remote client parses server answers into them and the
embedded tracker builds them from rows. Fields the embedded tracker adds (backlog extensions such
as ``concurrency_key``) default to ``None`` so a NullTickets answer, which lacks them, still parses.
Unknown fields are ignored, as the server itself ignores them.

Partly public (docs/reference/stability.md): the models an executor or an application reads
(the task, its run, events, artifacts, pipeline) are on the Python API reference; the rest,
the rail's own (leases, bodies of its operations, statistics), is internal.

The models a running worker never builds (a task's detail and relations, the create body,
events, pages, the health census) are named here and created on first use, in
:mod:`tracker_client.cold_models` (issue 31: a worker's start-up).
"""

import json
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from tracker_client.bounds import (
    MAX_AHEAD_MS,
    Count,
    DurationMs,
)
from tracker_client.capabilities import LeaseHandle

if TYPE_CHECKING:
    from tracker_client.cold_models import (
        Assignment,
        AvailableTransition,
        BudgetStatus,
        Dependency,
        Event,
        Health,
        Page,
        StageCount,
        TaskCreate,
        TaskDetail,
    )

__all__ = [
    "CORRUPT_MARKER",
    "DEAD_LETTER_NEVER_MS",
    "MAX_AHEAD_MS",
    "Artifact",
    "ArtifactCreate",
    "Assignment",
    "AvailableTransition",
    "BudgetStatus",
    "Dependency",
    "Event",
    "FailResult",
    "Health",
    "Lease",
    "ListedRun",
    "ListedState",
    "Page",
    "Pipeline",
    "QueueStats",
    "ReleaseResult",
    "RetryPolicy",
    "RoleStats",
    "Run",
    "StageCount",
    "StoreEntry",
    "Task",
    "TaskCreate",
    "TaskDetail",
    "TransitionResult",
]

#: The key of the marker object an embedded read shows in place of a stored JSON value that
#: does not parse (``{"_corrupt": "stored metadata of task ... is not valid JSON (...)"}``).
CORRUPT_MARKER = "_corrupt"
#: ``next_eligible_at_ms`` of a dead-lettered task, as NullTickets writes it.
DEAD_LETTER_NEVER_MS = 9223372036854775000

#: ``cancelled`` (a running task cancelled by an operator) and ``released`` (given back unfinished
#: by a worker shutting down, not counted as a failure) are embedded extensions.
RunStatus = Literal["running", "completed", "failed", "stale", "cancelled", "released"]
T = TypeVar("T")

#: The names :mod:`tracker_client.cold_models` defines, imported when one is first looked up.
_COLD = frozenset(
    {
        "Assignment",
        "AvailableTransition",
        "BudgetStatus",
        "Dependency",
        "Event",
        "Health",
        "Page",
        "StageCount",
        "TaskCreate",
        "TaskDetail",
    }
)


def __getattr__(name: str) -> Any:
    """A model of :mod:`tracker_client.cold_models`, created on its first lookup (:pep:`562`)."""
    if name in _COLD:
        from tracker_client import cold_models

        found = getattr(cold_models, name)
        globals()[name] = found  # looked up once
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Model(BaseModel):
    # defer_build: a model's validator/serializer is built on its first use instead of at
    # import. Validation is the same; a process that never touches a model (a worker uses a
    # handful of these) doesn't keep its compiled schema resident (about 0.8 MiB for the set).
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class _CreateModel(_Model):
    # A create input refuses unknown fields (``TaskCreate(depends_on=[...])`` is an error naming
    # ``depends_on``, not a silently dropped option). Answers stay lenient (``_Model``), and the
    # served tracker reads request bodies with ``extra="ignore"`` so a plain NullTickets client
    # sending a field we don't know is still accepted as NullTickets would.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class RetryPolicy(_CreateModel):
    """A task's retry policy, fixed at creation.

    ``max_attempts`` set to None = unlimited failures; left out, the embedded/served tracker
    uses the rail's default (5 unless configured; a plain NullTickets server: unlimited).
    A task created with no policy at all gets the whole default policy (exponential from 1 s,
    see ``tracker_client.rules.retrypolicy``). ``retry_delay_ms`` is the constant delay of
    NullTickets; with ``backoff="exponential"`` (embedded extension) the delay doubles per
    failure from ``retry_delay_ms`` up to ``max_retry_delay_ms``, drawn from ``[d/2, d]``.
    """

    # The ranges (tracker_client.bounds) are stated in the schema and applied by the rails.
    max_attempts: Count | None = None
    retry_delay_ms: DurationMs = 0
    dead_letter_stage: str | None = None
    backoff: Literal["constant", "exponential"] = "constant"
    max_retry_delay_ms: DurationMs | None = None


class ListedRun(_Model):
    """A task's latest run as ``GET /tasks`` lists it (extension ``list_state``)."""

    status: RunStatus
    attempt: int
    agent_id: str


class ListedState(_Model):
    """What a listing says of a task beyond its row (extension ``list_state``): its latest run
    and whether a dependency holds it, so ``task list`` shows every task's state from one
    request per page instead of reading each open task whole (docs/operate/commands.md)."""

    #: The task's latest run (None: never claimed).
    latest_run: ListedRun | None = None
    #: A dependency is not resolved yet (its upstream is open, dead-lettered or gone).
    blocked: bool = False


class Task(_Model):
    """A task as listed, claimed, and as the base of :class:`TaskDetail`."""

    id: str
    pipeline_id: str
    stage: str
    title: str
    description: str
    priority: int
    metadata: Any = Field(default_factory=dict)
    task_version: int
    next_eligible_at_ms: int
    retry_delay_ms: int
    max_attempts: int | None = None
    dead_letter_stage: str | None = None
    dead_letter_reason: str | None = None
    created_at_ms: int
    updated_at_ms: int
    # embedded extensions
    concurrency_key: str | None = None
    expires_at_ms: int | None = None
    #: The time a delayed task was scheduled for (None = created due).
    run_at_ms: int | None = None
    dedupe_key: str | None = None
    #: The task that spawned this one (extension ``subtasks``; None on plain NullTickets).
    parent_id: str | None = None
    #: The task's own crash-loop limit: after this many lease expiries in a row it is
    #: dead-lettered ``crash_loop`` (None: the rail's ``max_stale_attempts`` option, default 3).
    max_stale_attempts: int | None = None
    #: Lease expiries in a row now (a finished run or a requeue starts the count again).
    stale_streak: int = 0
    #: Its latest run and whether it is blocked, as ``list_tasks`` answers it on a rail with
    #: extension ``list_state``; None in any other answer, and on a plain NullTickets server.
    listed: ListedState | None = Field(None, json_schema_extra={"x-extension": "list_state"})
    #: Its own budgets as given at submit (extension ``budgets``, docs/operate/budgets.md;
    #: None: none given, its pipeline's and the rail's defaults apply).
    budgets: dict[str, Any] | None = Field(None, json_schema_extra={"x-extension": "budgets"})

    @field_validator("budgets", mode="before")
    @classmethod
    def _stored_budgets(cls, value: Any) -> Any:
        """A row holds them as JSON text; an answer as an object."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return None
        return value


class Run(_Model):
    """One attempt at a task by one agent. ``error``/``usage`` are readable on the embedded rail."""

    id: str
    task_id: str
    attempt: int
    status: RunStatus
    agent_id: str
    agent_role: str
    started_at_ms: int
    ended_at_ms: int | None = None
    # embedded extensions: NullTickets stores but never returns these
    error: str | None = None
    usage: Any = None


class Lease(_Model):
    """The answer to a successful claim. The token is a secret and never printed."""

    task: Task
    run: Run
    lease_id: str
    lease_token: SecretStr
    expires_at_ms: int
    #: The latest checkpoint of the task's earlier runs (extension ``checkpoints``; None: none).
    previous_checkpoint: Any = None

    @property
    def run_id(self) -> str:
        """The run id used by events, transition and fail."""
        return self.run.id

    @property
    def task_id(self) -> str:
        """The claimed task's id."""
        return self.task.id

    @property
    def ref(self) -> LeaseHandle:
        """The small reference lease operations need (no task, no run record)."""
        return LeaseHandle(self.lease_id, self.run.id, self.lease_token, self.task.id)


class Artifact(_Model):
    """A stored artifact reference."""

    id: str
    task_id: str | None = None
    run_id: str | None = None
    created_at_ms: int
    kind: str
    uri: str
    sha256: str | None = None
    size_bytes: int | None = None
    meta: Any = None


class Pipeline(_Model):
    """A pipeline: a named state machine definition."""

    id: str
    name: str
    definition: dict[str, Any]
    created_at_ms: int


class TransitionResult(_Model):
    """The answer to a successful transition."""

    previous_stage: str
    new_stage: str
    trigger: str


class FailResult(_Model):
    """The answer to ``fail``. NullTickets answers only ``status``; the extensions say what
    happened next (``None`` when the tracker does not tell)."""

    status: str = "failed"
    retry_scheduled: bool | None = None
    dead_lettered: bool | None = None
    next_eligible_at_ms: int | None = None
    dead_letter_reason: str | None = None


class ReleaseResult(_Model):
    """What ``release`` did with an unfinished run's task.

    ``released``: the task is claimable again now, its failure count unchanged (the run is
    ``released``). Otherwise (a plain NullTickets server, which has no such operation) nothing
    was changed: the task comes back when the lease expires, and the expired run does not count
    against ``max_attempts`` there either.
    """

    released: bool
    reason: str = "worker_shutdown"


class RoleStats(_Model):
    """Per-role queue figures of ``GET /ops/queue``; the fields after ``near_expiry_leases``
    are embedded-only (None from a plain NullTickets server)."""

    role: str
    claimable_count: int
    oldest_claimable_age_ms: int | None = None
    failed_count: int
    stuck_count: int
    near_expiry_leases: int
    # embedded extensions
    waiting_count: int | None = None
    running_count: int | None = None
    dead_letter_count: int | None = None
    max_backlog_depth: int | None = None
    #: Waiting tasks whose retry is not due yet (a failed run's delay), and the earliest due
    #: time (tracker clock, epoch ms; compare with ``generated_at_ms``).
    retry_waiting_count: int | None = None
    next_retry_at_ms: int | None = None
    #: Waiting delayed tasks whose run_at is still ahead (``scheduled``), and the earliest.
    scheduled_count: int | None = None
    next_scheduled_at_ms: int | None = None
    #: Cost reported by the role's open tasks (waiting and running), in USD and tokens, and its
    #: tasks dead-lettered ``budget_exceeded`` (extension ``budgets``, docs/operate/budgets.md).
    spent_usd: float | None = None
    spent_tokens: int | None = None
    budget_stopped_count: int | None = None


class QueueStats(_Model):
    """``GET /ops/queue``."""

    roles: list[RoleStats]
    generated_at_ms: int

    def for_role(self, role: str) -> RoleStats | None:
        """The figures of ``role``, or None when no pipeline declares it."""
        return next((r for r in self.roles if r.role == role), None)


class ArtifactCreate(_CreateModel):
    """The body of ``POST /artifacts``."""

    kind: str
    uri: str
    task_id: str | None = None
    run_id: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None
    meta: Any = None


class StoreEntry(_Model):
    """One KV store entry."""

    namespace: str
    key: str
    value: Any
    created_at_ms: int
    updated_at_ms: int
