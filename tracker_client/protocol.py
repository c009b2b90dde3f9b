"""The :class:`Tracker` protocol: the domain operations a worker or an operator needs.

Two implementations pass one contract suite (``tests/contract``): the embedded SQLite tracker
(:mod:`tracker_client.embedded`) and the NullTickets HTTP client
(:mod:`tracker_client.nulltickets.client`).
Operations are domain verbs, not queries; every method may raise the errors of
:mod:`tracker_client.errors` and nothing else.

Writes take an optional ``idempotency_key``. Callers that retry a logical write (see
``worker``'s retry policy) pass the *same* key on every retry of that write and a fresh key for
the next write; a replay returns the first answer instead of applying twice. Heartbeats take none.

Keys guard against *lost answers*: a write that committed but whose reply never arrived. A
tracker that cannot lose an answer (the embedded one: the commit and the reply happen in the
caller's own process, and an error means nothing was committed) declares
``answers_can_be_lost=False`` in its :class:`~tracker_client.capabilities.Capabilities`;
callers may then skip keys, which saves a lookup and a record per write.

What only some rails do is declared next to :class:`LeaseTracker` as small protocols
(:class:`ClaimsMany`, :class:`ParksClaims`, :class:`Finishes`, :class:`FinishesMany`,
:class:`RegistersWorkers`, :class:`EvolvesPipelines`); a :class:`Tracker` has them all, and
:class:`RailParts` says, from the rail's declared capabilities, which a caller may use. The
extension operations reached by name have typed calls in :mod:`tracker_client.calls`.

No I/O: it imports only models (:mod:`tracker_client.models`, the batching, observation and
operator answers) and :mod:`~tracker_client.capabilities` (no implementation), so a caller can
depend on the seam without loading SQLite or httpx.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from tracker_client.agent_models import UNSET, Upstream
from tracker_client.capabilities import Capabilities, LeaseRef
from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome, FinishResult
from tracker_client.contract.parked_models import ParkedCancelled
from tracker_client.models import (
    Artifact,
    ArtifactCreate,
    FailResult,
    Lease,
    Pipeline,
    QueueStats,
    ReleaseResult,
    Run,
    StoreEntry,
    Task,
    TransitionResult,
)
from tracker_client.observe_models import WorkerInfo

if TYPE_CHECKING:
    # annotations only: the operator's answers, never built by a worker (issue 31)
    from tracker_client.models import (
        Assignment,
        Dependency,
        Event,
        Health,
        Page,
        TaskCreate,
        TaskDetail,
    )
    from tracker_client.ops_models import (
        CancelResult,
        MaintenanceReport,
        PipelinePlan,
        RequeueResult,
        WaitResult,
    )

__all__ = [
    "ClaimsMany",
    "EvolvesPipelines",
    "Finishes",
    "FinishesMany",
    "LeaseTracker",
    "ParksClaims",
    "RailParts",
    "RegistersWorkers",
    "Tracker",
]


@runtime_checkable
class LeaseTracker(Protocol):
    """The narrow seam a worker needs: health, claim, the lease's writes, wake-ups,
    housekeeping, the pipeline definitions it picks triggers from and the queue figures a
    draining worker reads.

    Lease operations take a :class:`~tracker_client.capabilities.LeaseRef` (a claimed
    ``Lease`` is one), so a server can call them with the ids and token of a request alone.
    """

    async def capabilities(self) -> Capabilities:
        """What this tracker can do (read once and kept: it does not change while open)."""

    async def aclose(self) -> None:
        """Release connections and threads. Idempotent."""

    async def health(self) -> Health:
        """Liveness and a census of tasks per stage; raises ``TrackerUnavailable`` when down."""

    async def ping(self) -> None:
        """One cheap round trip that proves the tracker answers (what a worker waits on at
        start-up); raises ``TrackerUnavailable`` when down. It counts nothing, so unlike
        :meth:`health` its cost does not grow with the tasks the rail keeps."""

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        """One pipeline, or ``NotFound``."""

    async def queue_stats(
        self, *, near_expiry_ms: int | None = 60_000, stuck_ms: int = 300_000
    ) -> QueueStats:
        """Per-role queue figures.

        ``near_expiry_ms=None``: a lease is near expiry when less than a third of its own TTL
        is left (it missed a heartbeat; a worker heartbeats every third of the TTL). A tracker
        that doesn't expose lease TTLs (NullTickets) uses a third of the default 60 s TTL.
        """

    async def claim(
        self,
        agent_id: str,
        role: str,
        lease_ttl_ms: int,
        *,
        per_state: Mapping[str, int] | None = None,
        idempotency_key: str | None = None,
    ) -> Lease | None:
        """Claim the best eligible task of ``role``; None when there is no work."""

    async def heartbeat(
        self, lease: LeaseRef, *, lease_ttl_ms: int | None = None, checkpoint: Any = UNSET
    ) -> int:
        """Extend the lease; returns the new ``expires_at_ms``. ``LeaseLost`` when it is gone.

        ``checkpoint`` (extension ``checkpoints``; left out: unchanged) replaces the run's
        checkpoint in the same write: one JSON value of at most 64 KiB, else
        ``ValidationFailed`` naming the limit and nothing written (the lease not extended).
        ``Unsupported`` where the rail lacks the extension
        (:func:`tracker_client.agents.save_checkpoint` falls back to the KV store there).
        """

    async def checkpoint(self, lease: LeaseRef, data: Any) -> None:
        """Replace the run's checkpoint with ``data`` (extension ``checkpoints``; the limits of
        :meth:`heartbeat`'s ``checkpoint``). The next claim of the task hands the latest
        checkpoint of its runs as ``Lease.previous_checkpoint``."""

    async def add_event(
        self, lease: LeaseRef, kind: str, data: Any = None, *, idempotency_key: str | None = None
    ) -> int:
        """Append an event to the lease's run; returns the event id."""

    async def list_task_events(
        self, task_id: str, *, limit: int = 100, cursor: str | None = None, kind: str | None = None
    ) -> Page[Event]:
        """Every event of a task (all runs, plus task-level events), in id order.

        ``kind`` keeps only events of that kind (e.g. ``"transition"``: the task's moves).
        """

    async def transition(
        self,
        lease: LeaseRef,
        trigger: str,
        *,
        expected_stage: str | None = None,
        expected_task_version: int | None = None,
        instructions: str | None = None,
        usage: Any = None,
        wait_for: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> TransitionResult:
        """Complete the run and move the task; ``InvalidTransition`` keeps the lease.

        ``wait_for`` (extension ``fan_in``): task ids the task then waits for, the dependency
        edges added in the same write; refused whole, nothing written, for an unknown id
        (``NotFound``), the task itself or a cycle (``Conflict`` ``dependency_cycle`` naming
        it). ``Unsupported`` where the rail lacks it (:func:`tracker_client.agents.
        transition_waiting` adds the edges one by one there).
        """

    async def fail(
        self,
        lease: LeaseRef,
        error: str,
        *,
        usage: Any = None,
        retryable: bool = True,
        idempotency_key: str | None = None,
    ) -> FailResult:
        """Fail the run; the task's retry policy decides between retry and dead letter.

        ``retryable=False`` (a permanent failure, e.g. a misconfigured executor) dead-letters the
        task at once with reason ``permanent_failure`` where the tracker supports it; a plain
        NullTickets server ignores it and applies its retry policy.
        """

    async def release(
        self,
        lease: LeaseRef,
        reason: str = "worker_shutdown",
        *,
        idempotency_key: str | None = None,
    ) -> ReleaseResult:
        """Give an unfinished run's task back (its worker is shutting down): not a failure.

        The run ends ``released``; the task is claimable again at once, its failure count and
        retry delay untouched. A plain NullTickets server has no such operation: nothing is
        written and the task returns when the lease expires (``released=False``), which costs
        no attempt there either, rather than a ``fail`` that would count one.
        """

    async def add_artifact(
        self, artifact: ArtifactCreate, *, idempotency_key: str | None = None
    ) -> str:
        """Record an artifact; ``NotFound`` for an unknown task or run id."""

    async def maintenance(self) -> MaintenanceReport:
        """Reclaim expired leases, dead-letter expired and crash-looping tasks, purge old keys."""

    async def wait_for_work(self, timeout_s: float, *, since: str | None = None) -> str:
        """Return early when the rail may have new work, else after ``timeout_s``.

        A cheap wake-up for idle workers; returning is a hint, not a promise of work. The
        answer is a change mark: passed back as ``since`` to the next wait, that wait returns
        at once when the rail changed in between, so a write landing while the caller was not
        waiting is never lost (a mark from another tracker object only costs an early return).
        """


class ClaimsMany(Protocol):
    """Extension ``claim_many``: several leases of a role in one write."""

    async def claim_many(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        *,
        idempotency_key: str | None = None,
    ) -> list[Lease]:
        """Up to ``n`` leases of ``agent_role`` (empty: no work); ``Unsupported`` where the
        rail lacks the extension."""


class ParksClaims(Protocol):
    """Extension ``parked_claim``: a claim that waits at the rail for work and leases it as it
    comes (one answer for an idle worker's pickup instead of a wake-up and a claim)."""

    @property
    def quiet_parks(self) -> bool:
        """Whether a parked claim costs the rail nothing while it waits (no write, no poll: it
        sleeps until a wake-up or the time work comes due), so an idle worker's parks start
        from half its back-off's ceiling, or of ``worker.daemon.pacing.QUIET_PARK_S`` if
        longer, instead of doubling up from ``idle_min_s`` (docs/benchmarks/pickup.md,
        docs/benchmarks/costs.md). False where a shorter park answers a pickup sooner (the served
        rail) or time alone does not end the wait (the SQLite rail's delayed tasks)."""

    async def parked_claim(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        wait_ms: int,
        *,
        concurrency: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
    ) -> list[Lease]:
        """Up to ``n`` leases of ``agent_role``, waiting up to ``wait_ms`` for work (empty: none
        came). ``idempotency_key`` is required: a retry under it answers the same leases, and
        cancelling the call (or :meth:`cancel_parked_claim` under it) gives back what it
        leased; ``Unsupported`` where the rail lacks the extension."""

    async def cancel_parked_claim(self, *, idempotency_key: str | None = None) -> ParkedCancelled:
        """Stop the parked claim of ``idempotency_key`` and release what it leased that its
        caller did not take (how many)."""


class Finishes(Protocol):
    """Extension ``finish``: a run's last events and its transition or fail in one write."""

    async def finish(
        self,
        lease: LeaseRef,
        *,
        events: Sequence[Mapping[str, Any]] = (),
        transition: Mapping[str, Any] | None = None,
        fail: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> FinishResult:
        """Write ``events`` then ``transition`` or ``fail``, all or nothing."""


class FinishesMany(Protocol):
    """Extension ``finish_many``: the final reports of many runs in one request."""

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """Per item, its ``finish`` answer or the error refusing it, in input order."""


class EvolvesPipelines(Protocol):
    """Extension ``pipeline_versions``: change a pipeline by name as a new version
    (docs/operate/pipelines.md)."""

    async def apply_pipeline(
        self, name: str, definition: Mapping[str, Any], moves: Mapping[str, str] | None = None
    ) -> PipelinePlan:
        """Create pipeline ``name`` or store ``definition`` as its next version, moving the
        tasks of the stages it removes by ``moves`` (old stage -> new stage), in one write.
        An unchanged definition writes nothing (``unchanged``). ``ValidationFailed`` names a
        bad definition or move; ``Conflict`` ``stage_holds_tasks`` names each stage that would
        strand tasks and how many."""

    async def diff_pipeline(
        self, name: str, definition: Mapping[str, Any], moves: Mapping[str, str] | None = None
    ) -> PipelinePlan:
        """What :meth:`apply_pipeline` would do, writing nothing; refused as it would be."""


class RegistersWorkers(Protocol):
    """Extension ``workers``: a worker's entry in the rail's worker list."""

    async def register_worker(self, worker_id: str, **fields: Any) -> WorkerInfo:
        """Register ``worker_id`` or refresh it (the fields of
        :class:`~tracker_client.observe_models.WorkerRegister`)."""


@runtime_checkable
class Tracker(
    LeaseTracker,
    ClaimsMany,
    ParksClaims,
    Finishes,
    FinishesMany,
    RegistersWorkers,
    EvolvesPipelines,
    Protocol,
):
    """The whole rail: the lease seam plus pipelines, tasks, runs, artifacts and a KV store.

    It has a method for each extension of :class:`ClaimsMany`, :class:`ParksClaims`,
    :class:`Finishes`,
    :class:`FinishesMany`, :class:`RegistersWorkers` and :class:`EvolvesPipelines`
    (``Unsupported`` where the rail lacks it); :class:`RailParts` says which of them the rail
    declared.
    """

    async def call(self, operation: str, /, *params: str, **arguments: Any) -> Any:
        """Call an operation of the wire contract by its name (a row of
        :data:`tracker_client.contract.table.OPERATIONS`), with its path parameters in
        order and its body fields and query parameters as keywords, for an operation whose
        method takes them so (the shape the served tracker serves from the row alone; not
        e.g. ``create_task``, which takes a model); answers what the typed method would (a
        one-field answer is its value).

        The way to an extension operation that has no typed method here: adding one is a row
        in the table and the embedded tracker's method, and every tracker (embedded, served,
        remote) answers it. ``Unsupported`` where the server lacks it, ``KeyError`` for a name
        the table doesn't have.
        """

    async def create_pipeline(
        self, name: str, definition: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> str:
        """Validate and store a pipeline; returns its id.

        ``ValidationFailed`` names the broken rule; ``Conflict`` (``duplicate_name``).
        """

    async def list_pipelines(self) -> list[Pipeline]:
        """All pipelines, newest first."""

    async def create_task(self, task: TaskCreate, *, idempotency_key: str | None = None) -> str:
        """Create a task in its pipeline's initial stage; returns its id.

        ``NotFound`` for an unknown pipeline or dependency, ``BacklogFull`` past the role's cap.
        """

    async def create_tasks(
        self, tasks: Sequence[TaskCreate], *, idempotency_key: str | None = None
    ) -> list[str]:
        """Create many tasks, all or nothing; ids in input order."""

    async def list_tasks(
        self,
        *,
        stage: str | None = None,
        pipeline_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[Task]:
        """Tasks in creation order; ``next_cursor`` continues without skipping any item."""

    async def get_task(self, task_id: str) -> TaskDetail:
        """The task with latest run, dependencies, assignments and available transitions."""

    async def list_runs(self, task_id: str) -> list[Run]:
        """Every run of a task, by attempt (a remote tracker may only know the latest)."""

    async def add_dependency(
        self, task_id: str, depends_on_task_id: str, *, idempotency_key: str | None = None
    ) -> None:
        """Make ``task_id`` wait for ``depends_on_task_id`` to reach a terminal stage."""

    async def list_dependencies(self, task_id: str) -> list[Dependency]:
        """The task's dependencies and whether each is resolved now."""

    async def assign(
        self,
        task_id: str,
        agent_id: str,
        *,
        assigned_by: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        """Make ``agent_id`` the only agent that may claim the task (deactivates others)."""

    async def list_assignments(self, task_id: str) -> list[Assignment]:
        """All assignments of a task, inactive ones included."""

    async def unassign(
        self, task_id: str, agent_id: str, *, idempotency_key: str | None = None
    ) -> None:
        """Deactivate ``agent_id``'s active assignment, or ``NotFound``."""

    async def list_events(
        self, run_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Event]:
        """A run's events in id order."""

    async def list_artifacts(
        self,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Artifact]:
        """Artifacts in creation order."""

    async def store_put(self, namespace: str, key: str, value: Any) -> None:
        """Upsert a value."""

    async def store_get(self, namespace: str, key: str) -> StoreEntry:
        """One entry, or ``NotFound``."""

    async def store_delete(self, namespace: str, key: str) -> None:
        """Delete a key (absent keys are fine)."""

    async def store_list(self, namespace: str) -> list[StoreEntry]:
        """All entries of a namespace, sorted by key."""

    async def store_delete_namespace(self, namespace: str) -> None:
        """Delete a whole namespace."""

    async def store_search(
        self,
        query: str,
        *,
        namespace: str | None = None,
        limit: int = 10,
        filter_path: str | None = None,
        filter_value: str | None = None,
    ) -> list[StoreEntry]:
        """Full-text search: every word must match (as a phrase); rank order."""

    async def cancel(
        self, task_id: str, *, reason: str = "cancelled", idempotency_key: str | None = None
    ) -> CancelResult:
        """Make a waiting task unclaimable, or revoke a running task's lease.

        ``Conflict`` when the task is already terminal, dead-lettered or cancelled. A retry
        with the same ``idempotency_key`` (after a lost answer) gets the first answer, not that
        ``Conflict``; the same key with other arguments is ``Conflict`` (idempotency_conflict).
        """

    async def cancel_all(
        self,
        *,
        pipeline_id: str | None = None,
        role: str | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """Cancel every waiting and running task of a pipeline and/or role; returns the count
        (a retry with the same ``idempotency_key`` gets the first count, not 0)."""

    async def requeue(
        self,
        task_id: str,
        *,
        stage: str | None = None,
        reset_attempts: bool = True,
        idempotency_key: str | None = None,
    ) -> RequeueResult:
        """Bring a dead-lettered or cancelled task back to ``stage`` (default: where it was);
        a retry with the same ``idempotency_key`` gets the first answer."""

    async def wait(self, task_id: str, *, timeout_s: float) -> WaitResult:
        """Block until the task is finished (terminal, dead-lettered, cancelled) or timeout."""

    async def list_upstream(self, task_id: str) -> list[Upstream]:
        """Each dependency of the task: its stage, outcome, last ``result`` and artifacts
        (extension ``upstream``; :func:`tracker_client.agents.upstream_of` composes it from
        plain reads where the rail lacks it). ``NotFound`` for an unknown task."""

    async def transition_task(
        self,
        task_id: str,
        trigger: str,
        *,
        expected_stage: str,
        expected_task_version: int | None = None,
        instructions: str | None = None,
        idempotency_key: str | None = None,
    ) -> TransitionResult:
        """Move a task waiting in a stage with no role (a human step) along ``trigger``
        (extension ``human_steps``). ``Conflict`` ``not_a_human_step`` for a task in a stage
        with a role, leased, finished or dead-lettered, ``expected_stage_mismatch`` when it
        is no longer in ``expected_stage``; ``InvalidTransition`` lists the allowed triggers.
        The instructions are recorded as a worker's transition records them."""


class RailParts(NamedTuple):
    """A whole rail and the extensions it declared, as typed optional parts.

    Built once from the rail's :class:`~tracker_client.capabilities.Capabilities`
    (:meth:`declared`), so a caller chooses its path by whether a part is there, never by
    probing the tracker: a part is None where the rail lacks its extension.
    """

    #: The whole rail: its store, task and contract calls.
    rail: Tracker
    claim_many: ClaimsMany | None = None
    parked_claim: ParksClaims | None = None
    finish: Finishes | None = None
    finish_many: FinishesMany | None = None
    workers: RegistersWorkers | None = None
    pipelines: EvolvesPipelines | None = None

    @classmethod
    def declared(cls, rail: Tracker, capabilities: Capabilities) -> RailParts:
        """``rail`` with the parts of the extensions ``capabilities`` declares."""
        ext = capabilities.extensions
        return cls(
            rail,
            claim_many=rail if "claim_many" in ext else None,
            parked_claim=rail if "parked_claim" in ext else None,
            finish=rail if "finish" in ext else None,
            finish_many=rail if "finish_many" in ext else None,
            workers=rail if "workers" in ext else None,
            pipelines=rail if "pipeline_versions" in ext else None,
        )
