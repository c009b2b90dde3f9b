"""The data models a running worker never builds, created on their first use.

:mod:`tracker_client.models` names them (their ``__module__`` is that module's, as the API
reference and pickles name them) and imports this module when one is first looked up
(:pep:`562`): a task's detail and relations, the task an operator or a producer creates, the
run's events, pages of a listing and the health census. Creating a model class costs ~1.5 M
instructions even unbuilt (``defer_build``); a worker that never touches these skips ~17 M of
its start-up (``python -m bench.startup``, issue 31). Code that a worker imports names them in
annotations (under ``TYPE_CHECKING``) and imports them inside the functions that build them.
The models an executor's calls build (``ArtifactCreate``, ``StoreEntry``) stay in
:mod:`tracker_client.models`: the public plugin modules name them in signatures, which must
resolve at run time.
"""

from typing import Annotated, Any, Generic

from pydantic import Field

from tracker_client.bounds import (
    MAX_DEDUPE_KEY_CHARS,
    MAX_TITLE_CHARS,
    AheadMs,
    Count,
    EpochMs,
    Int64,
    NonEmpty,
    PositiveDurationMs,
)
from tracker_client.models import _COLD, RetryPolicy, Run, T, Task, _CreateModel, _Model

#: The names :mod:`tracker_client.models` creates from here on first lookup (its ``_COLD``).
__all__ = sorted(_COLD)


class Dependency(_Model):
    """``depends_on_task_id`` and whether that task is in a terminal stage now."""

    __module__ = "tracker_client.models"

    depends_on_task_id: str
    resolved: bool


class Assignment(_Model):
    """An assignment of a task to one agent; only one is active at a time."""

    __module__ = "tracker_client.models"

    task_id: str | None = None
    agent_id: str
    assigned_by: str | None = None
    active: bool
    created_at_ms: int
    updated_at_ms: int


class AvailableTransition(_Model):
    """A transition out of the task's current stage."""

    __module__ = "tracker_client.models"

    trigger: str
    to: str
    required_gates: list[str] = Field(default_factory=list)


class BudgetStatus(_Model):
    """A task's budgets for agent loops and what it used against them (extension ``budgets``,
    docs/operate/budgets.md): ``max_loops`` (re-entries of one stage), ``max_runs`` (runs across
    stages), ``max_cost`` (USD its runs reported) and ``max_tokens`` (tokens they reported)."""

    __module__ = "tracker_client.models"

    #: The limits in force: the task's own over its pipeline's over the rail's defaults
    #: (``max_loops`` 10); None: no cap.
    max_loops: int | None = None
    max_runs: int | None = None
    max_cost: float | None = None
    max_tokens: int | None = None
    #: Runs counted against ``max_runs`` (since the last requeue).
    runs: int = 0
    #: Re-entries per stage counted against ``max_loops`` (stages on a loop that were entered).
    loops: dict[str, int] = Field(default_factory=dict)
    #: Cost reported since the last requeue (USD, tokens): what the caps compare.
    spent_usd: float = 0.0
    spent_tokens: int = 0
    #: Cost reported over the task's whole life (a requeue does not forget money spent).
    total_usd: float = 0.0
    total_tokens: int = 0
    #: The figures of the budget that dead-lettered it (``loops 3 of 3 in stage review``), when
    #: its dead-letter reason is ``budget_exceeded``; else None.
    exceeded: str | None = None

    def rows(self) -> list[tuple[str, str]]:
        """The figures as (label, text) rows, as ``task show`` and the dashboard print them:
        each use against its cap (``runs 4 of 10``), the spend and which budget stopped it."""

        def of(used: str, cap: str | None) -> str:
            return f"{used} (no cap)" if cap is None else f"{used} of {cap}"

        looped = ", ".join(f"{stage} {n}" for stage, n in self.loops.items() if n) or "none"
        cap = "no cap" if self.max_loops is None else f"cap {self.max_loops} per stage"
        usd = None if self.max_cost is None else f"{self.max_cost:.2f} USD"
        tokens = None if self.max_tokens is None else str(self.max_tokens)
        out = [
            ("loops", f"{looped} ({cap})"),
            ("runs", of(str(self.runs), None if self.max_runs is None else str(self.max_runs))),
            ("cost", of(f"{self.spent_usd:.2f} USD", usd)),
            ("tokens", of(str(self.spent_tokens), tokens)),
        ]
        if (self.total_usd, self.total_tokens) != (self.spent_usd, self.spent_tokens):
            out.append(("spent in all", f"{self.total_usd:.2f} USD, {self.total_tokens} tokens"))
        if self.exceeded:
            out.append(("exceeded", self.exceeded))
        return out


class TaskDetail(Task):
    """``GET /tasks/{id}``: the task, its latest run (None if never claimed) and its relations."""

    __module__ = "tracker_client.models"

    latest_run: Run | None = None
    dependencies: list[Dependency] = Field(default_factory=list)
    assignments: list[Assignment] = Field(default_factory=list)
    available_transitions: list[AvailableTransition] = Field(default_factory=list)
    #: Its budgets and their use (extension ``budgets``, docs/operate/budgets.md; None: a
    #: rail without it).
    budget: BudgetStatus | None = None


class TaskCreate(_CreateModel):
    """The body of ``POST /tasks`` (and one item of ``POST /tasks/bulk``).

    The last four fields are embedded-tracker extensions (docs/guarantees/backlog.md); a NullTickets
    server ignores them.
    """

    __module__ = "tracker_client.models"

    # The ranges (tracker_client.bounds) are stated in the schema and applied by the rails.
    pipeline_id: str
    title: str = Field(json_schema_extra={"maxLength": MAX_TITLE_CHARS})
    description: str = ""
    priority: Int64 = 0
    metadata: Any = Field(default_factory=dict)
    retry_policy: RetryPolicy | None = None
    dependencies: list[str] | None = None
    assigned_agent_id: NonEmpty | None = None
    assigned_by: str | None = None
    concurrency_key: NonEmpty | None = None
    #: Absolute deadline (epoch ms) for a task still waiting; past it the task is dead-lettered.
    expires_at_ms: EpochMs | None = None
    #: Queue TTL at creation: ``expires_at_ms = now + queue_ttl_ms``.
    queue_ttl_ms: PositiveDurationMs | None = None
    #: Consecutive stale runs (lease expiries) before the task is dead-lettered ``crash_loop``.
    max_stale_attempts: Count | None = None
    #: Not claimable before this time (epoch ms); in the past = due now; at most ten years
    #: ahead. Embedded extension.
    run_at_ms: EpochMs | None = None
    #: Not claimable for this long from creation (``run_at_ms = now + delay_ms``).
    delay_ms: AheadMs | None = None
    #: While a task with this key is waiting or running, a create answers its id instead.
    dedupe_key: (
        Annotated[str, Field(json_schema_extra={"minLength": 1, "maxLength": MAX_DEDUPE_KEY_CHARS})]
        | None
    ) = None
    #: Keep deduping for this long after the task with the key finished.
    dedupe_window_ms: AheadMs | None = None
    #: The task that spawned this one (extension ``subtasks``): cancelling it cancels this.
    parent_id: str | None = None
    #: Its own budgets for agent loops, over its pipeline's (extension ``budgets``,
    #: docs/operate/budgets.md): ``max_loops``, ``max_runs``, ``max_cost`` (USD),
    #: ``max_tokens``; null: no cap. An object checked by the rail, which names a bad key or
    #: value (so every rail and client refuses the same input the same way).
    budgets: Any = None


class Event(_Model):
    """A run event. ``id`` is a global integer sequence."""

    __module__ = "tracker_client.models"

    id: int
    #: None for task-level events of the embedded tracker (e.g. a cancel before any claim).
    run_id: str | None
    ts_ms: int
    kind: str
    data: Any = Field(default_factory=dict)
    # embedded extension
    task_id: str | None = None


class Page(_Model, Generic[T]):
    """One page of a list. ``next_cursor`` is a correct cursor (built from the last item)."""

    __module__ = "tracker_client.models"

    items: list[T]
    next_cursor: str | None = None


class StageCount(_Model):
    """Number of tasks in a stage (by stage name, across pipelines)."""

    __module__ = "tracker_client.models"

    stage: str
    count: int


class Health(_Model):
    """``GET /health``."""

    __module__ = "tracker_client.models"

    status: str
    version: str
    tasks_by_stage: list[StageCount] = Field(default_factory=list)
    active_leases: int = 0
