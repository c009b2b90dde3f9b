"""``Rail``: every operation of the rail, once, over the storage an engine gives it.

The rules of the rail (docs/guarantees/backlog.md: claims, leases, retries, dependencies,
concurrency keys, the store, schedules, ...) are the functions of this package, each taking a
:class:`~tracker_client.rules.common.Ctx` (one transaction's view). :class:`Rail` is the API
over them: each operation validates nothing itself but hands one rules function to its
engine (:class:`~tracker_client.rules.engine.Engine`: a write or a read transaction), wrapped in
the idempotency record where the operation takes a key. The engine is the only part that
differs between rails: :class:`~tracker_client.embedded.EmbeddedTracker` is this class over the
SQLite engine; ``PostgresTracker`` (:mod:`tracker_client.postgres.tracker`) is this class over
the PostgreSQL engine, overriding only the operations PostgreSQL does its own way.

Adding an operation: its row in the contract table (:mod:`tracker_client.contract.table`), its
rules function in the module of this package it belongs to (its statements in each engine's
``sql/*.sql``), and one method here, in the section of its kind.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

import anyio
from pydantic import BaseModel

from tracker_client.agent_models import UNSET, Upstream
from tracker_client.capabilities import LeaseRef
from tracker_client.contract.batch_models import (
    FinishItem,
    FinishManyOutcome,
    FinishResult,
    check_items,
    per_state_of,
)
from tracker_client.contract.parked_models import ParkedCancelled, check_parked
from tracker_client.errors import ValidationFailed
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
from tracker_client.rules import claims, reads, runs, stats, tasks
from tracker_client.rules.agents import list_upstream, transition_task
from tracker_client.rules.checkpoints import write_checkpoint
from tracker_client.rules.claim_many import claim_many, keyed_claim_many
from tracker_client.rules.common import Ctx, Options, list_assignments
from tracker_client.rules.engine import QUIET_WRITES, Changes, Clock, Engine, Watch, wakes_waiters
from tracker_client.rules.finish import Part, finish_keyed, prepare
from tracker_client.rules.finish_many import prepared_item, write_items
from tracker_client.rules.follow import check_follow, follow_state
from tracker_client.rules.idempotency import idempotent, no_answer, replay_none
from tracker_client.rules.links import add_dependency, assign, list_dependencies, unassign
from tracker_client.rules.parked import ParkedClaims, attempt_key
from tracker_client.rules.pipelines import PipelineCache
from tracker_client.rules.ratelimits import clear_limit, list_limits, set_limit
from tracker_client.rules.release import release
from tracker_client.rules.runs import check_lease, token_hash
from tracker_client.rules.schedules import (
    create,
    fire_due,
    schedule_from_row,
    schedule_row,
    set_paused,
)
from tracker_client.rules.schedules import delete as remove_schedule
from tracker_client.rules.spans import (
    MAX_BLOB_BYTES,
    check_content_type,
    list_task_spans,
    span_limit,
    store_blob,
    store_spans,
)
from tracker_client.rules.store import delete, delete_namespace, get, list_namespace, put, search
from tracker_client.rules.workers import forget, list_all, register
from tracker_client.sweeps import SweepCounts

if TYPE_CHECKING:
    import sqlite3

    from tracker_client.models import (
        Assignment,
        Dependency,
        Event,
        Health,
        Page,
        TaskCreate,
        TaskDetail,
    )

    # annotations only (issue 31): the answers of the operator's and the server's calls, built
    # by the rules that make them (imported there), never by a worker; the backlog rules
    from tracker_client.observe_models import OtlpIngestResult, Span, WorkerInfo
    from tracker_client.ops_models import (
        CancelResult,
        MaintenanceReport,
        PipelinePlan,
        PurgeResult,
        RequeueAllResult,
        RequeueResult,
        TaskFollow,
        WaitResult,
    )
    from tracker_client.rules import backlog
    from tracker_client.schedule_models import RateLimit, Schedule

__all__ = ["LAPSE_MARGIN_S", "MAINTENANCE_PURGE_BATCHES", "Rail", "WriteJob"]

R = TypeVar("R")
E = TypeVar("E", bound=Engine)

#: Purge batches one maintenance pass runs at most (the next pass goes on where it stopped).
MAINTENANCE_PURGE_BATCHES = 20
_DAY_MS = 86_400_000
#: ``wait_for_work`` returns this long after the earliest live lease's expiry, so that the claim
#: it prompts finds the lease lapsed by the tracker's clock.
LAPSE_MARGIN_S = 0.01


class WriteJob(Generic[R]):
    """One write of :class:`Rail` as its engine runs it: :attr:`job` (the rule ``fn`` in a
    context of the transaction, made on the database thread) and :attr:`committed` (the
    context's log lines, once committed); :attr:`ctx` is the context of its last run (a job
    run again, after a rolled-back group, answers with its last run)."""

    __slots__ = ("_fn", "_make", "ctx", "where")

    def __init__(
        self, where: str, fn: Callable[[Ctx], R], make: Callable[[sqlite3.Connection], Ctx]
    ) -> None:
        self.where = where
        self._fn = fn
        self._make = make
        self.ctx: Ctx | None = None

    def job(self, conn: sqlite3.Connection) -> R:
        """Run the rule in a fresh context of the transaction on ``conn``."""
        ctx = self.ctx = self._make(conn)
        return self._fn(ctx)

    def committed(self) -> None:
        """Emit the write's log lines (on the database thread, right after the commit)."""
        if self.ctx is not None:
            self.ctx.flush_logs()


class Rail(Generic[E]):
    """Every operation of the rail over the engine ``E`` (see the module docstring).

    A rail's class is this one with its engine, its ``open`` and its ``capabilities``.
    """

    def __init__(
        self, engine: E, opts: Options, clock: Clock, sweeps: SweepCounts | None = None
    ) -> None:
        self._engine = engine
        self._changes: Changes = engine.changes
        self._sweeps = sweeps if sweeps is not None else SweepCounts()
        self._opts = opts
        self._clock = clock
        self._pipelines = PipelineCache()
        self._rng = random.SystemRandom()
        self._parked = ParkedClaims()

    @property
    def path(self) -> str:
        """The engine's database (a file, ``:memory:``, or a URL without its password)."""
        return self._engine.path

    @property
    def engine(self) -> E:
        """The engine the rail runs over (its database: for tools such as ``rail copy``)."""
        return self._engine

    @property
    def options(self) -> Options:
        """The effective options."""
        return self._opts

    async def aclose(self) -> None:
        """Close the engine (its database, threads and listeners). Idempotent."""
        await self._engine.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing -------------------------------------------------------------------------------
    def _ctx(self, conn: sqlite3.Connection) -> Ctx:
        return Ctx(conn, int(self._clock()), self._opts, self._pipelines, self._engine.statements)

    async def _write(self, where: str, fn: Callable[[Ctx], R]) -> R:
        """Run ``fn`` in a write transaction of the engine; wake who the write may concern."""
        write = self._write_job(where, fn)
        try:
            result = await self._engine.write(where, write.job, write.committed)
        except BaseException:
            self._write_failed(where)
            raise
        self._written(write, result)
        return result

    def _write_job(self, where: str, fn: Callable[[Ctx], R]) -> WriteJob[R]:
        """``fn`` as the engine's job for the write ``where`` (its context made on the
        database thread), with what runs once it committed; :meth:`_written` or
        :meth:`_write_failed` after it (what :meth:`_write` does around the engine's write)."""
        return WriteJob(where, fn, self._ctx)

    def _written(self, write: WriteJob[Any], result: object) -> None:
        """After ``write`` committed, answering ``result``: caches, sweep counts, wake-ups."""
        changes = self._changes
        where, ctx = write.where, write.ctx
        if where == "apply_pipeline":
            self._pipelines.applied()  # this process reads every current version again
        if ctx is not None and ctx.swept != (0, 0):
            self._sweeps.add(*ctx.swept)
        if wakes_waiters(where, result):
            changes.notify()
        changes.wake_followers()

    def _write_failed(self, where: str) -> None:
        """After the write ``where`` failed (it may have committed before failing to answer)."""
        changes = self._changes
        if where not in QUIET_WRITES:
            changes.notify()
        if where in ("create_pipeline", "apply_pipeline"):
            self._pipelines = PipelineCache()  # a rolled-back write may be cached
        changes.wake_followers()

    async def _read(self, where: str, fn: Callable[[Ctx], R]) -> R:
        """Run ``fn`` in a read transaction of the engine."""
        return await self._engine.read(where, lambda conn: fn(self._ctx(conn)))

    # -- lifecycle ------------------------------------------------------------------------------
    async def health(self) -> Health:
        """Tasks per stage and live leases."""
        return await self._read("health", stats.health)

    async def ping(self) -> None:
        """One statement that reads no table, in a read transaction: the database answers."""
        await self._read("ping", stats.ping)

    async def wait(self, task_id: str, *, timeout_s: float) -> WaitResult:
        """Block until the task is finished (terminal, dead-lettered, cancelled) or timeout."""
        from tracker_client.rules import backlog  # an operator's or a producer's call (issue 31)

        deadline = anyio.current_time() + max(0.0, float(timeout_s))
        changes = self._changes
        changes.waiters += 1
        try:
            while True:
                # Before the look: a write committed after the row is seen wakes it.
                watch = await self._engine.watch(deadline - anyio.current_time())
                event = changes.changed
                result = await self._read(
                    "wait", _stamped(watch, lambda c: backlog.finished_state(c, task_id))
                )
                remaining = deadline - anyio.current_time()
                if result.finished or remaining <= 0:
                    return result
                await watch.sleep(event, remaining)
        finally:
            changes.waiters -= 1

    async def wait_for_work(self, timeout_s: float, *, since: str | None = None) -> str:
        """Return early when something was written that may make work (here: see
        :func:`~tracker_client.rules.engine.wakes_waiters`; another process or host: as the
        engine notices it), or when the earliest live lease lapses (its task is claimable
        again), else on timeout. Answers the instance's change count
        (:class:`~tracker_client.rules.engine.Changes`): a ``since`` it has passed returns at
        once, so a write between two waits (one a worker's watch pauses through) wakes the
        second."""
        changes = self._changes
        changes.waiters += 1
        try:
            watch = await self._engine.watch(None)
            event = changes.changed  # a wake-up from here on sets it
            if since is not None and since != str(changes.seq):
                return str(changes.seq)
            now_ms = int(self._clock())

            def look(c: Ctx) -> int | None:
                found = c.scalar("wait.next_expiry", (now_ms,))
                return None if found is None else int(found)

            next_expiry_ms = await self._read("wait_for_work", _stamped(watch, look))
            limit = max(0.0, float(timeout_s))
            if next_expiry_ms is not None:
                limit = min(limit, (next_expiry_ms - now_ms) / 1000 + LAPSE_MARGIN_S)
            await watch.sleep(event, limit)
            return str(changes.seq)
        finally:
            changes.waiters -= 1

    async def _sweep_and_purge(self) -> MaintenanceReport:
        """Reclaim expired leases, dead-letter expired and crash-looping tasks, purge old keys,
        and purge finished tasks older than ``retention_days`` (a bounded number of small
        batches per pass; see :mod:`.retention`): :meth:`maintenance` before the schedules."""
        from tracker_client.rules import maintenance, retention  # not at start (issue 31)

        report = await self._write("maintenance", maintenance.maintenance)
        days = self._opts.retention_days
        if days <= 0:
            return report
        purged = await retention.purge(
            self._read,
            self._write,
            cutoff_ms=int(self._clock()) - days * _DAY_MS,
            max_batches=MAINTENANCE_PURGE_BATCHES,
        )
        return report.model_copy(update={"purged_tasks": purged.tasks})

    async def purge(
        self, *, older_than_ms: int, dry_run: bool = False, pipeline_id: str | None = None
    ) -> PurgeResult:
        """Purge finished tasks last updated more than ``older_than_ms`` ago (with their runs,
        events, artifact records, links and idempotency records), in small transactions, then
        vacuum the freed pages; ``dry_run`` only counts. Waiting and running work, and a
        finished task an unfinished one depends on, are never purged."""
        from tracker_client.rules import retention  # an operator's call (issue 31)

        age = retention.check_age(older_than_ms)
        return await retention.purge(
            self._read,
            self._write,
            cutoff_ms=int(self._clock()) - age,
            pipeline_id=pipeline_id,
            dry_run=bool(dry_run),
        )

    # -- the contract table ---------------------------------------------------------------------
    async def call(self, operation: str, /, *params: str, **arguments: Any) -> Any:
        """The operation of the contract table called ``operation`` (see the protocol)."""
        # Imported here: the table's rows (~2 ms of start-up) serve only calls by name.
        from tracker_client.contract import table as contract

        op = contract.operation(operation)  # KeyError: not an operation of the contract
        method: Callable[..., Awaitable[Any]] = getattr(self, op.name)
        return await method(*params, **arguments)

    # -- pipelines ------------------------------------------------------------------------------
    async def create_pipeline(
        self, name: str, definition: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> str:
        """Validate and store a pipeline; returns its id."""
        return await self._write(
            "create_pipeline",
            lambda c: idempotent(
                c,
                idempotency_key,
                "create_pipeline",
                {"name": name, "definition": definition},
                lambda: tasks.create_pipeline(c, name, definition),
                str,
                str,
            ),
        )

    async def apply_pipeline(
        self, name: str, definition: Mapping[str, Any], moves: Mapping[str, str] | None = None
    ) -> PipelinePlan:
        """Create pipeline ``name`` or store ``definition`` as its next version, moving the
        tasks of removed stages by ``moves``, in one transaction; unchanged: nothing written
        (see :mod:`~tracker_client.rules.evolve`)."""
        # imported here: an operator's command, cold in a worker (issue 31, memory)
        from tracker_client.rules import evolve

        return await self._write(
            "apply_pipeline", lambda c: evolve.apply(c, name, definition, moves)
        )

    async def diff_pipeline(
        self, name: str, definition: Mapping[str, Any], moves: Mapping[str, str] | None = None
    ) -> PipelinePlan:
        """What :meth:`apply_pipeline` would do, writing nothing (refused as it would be)."""
        from tracker_client.rules import evolve

        return await self._read("diff_pipeline", lambda c: evolve.plan(c, name, definition, moves))

    async def list_pipelines(self) -> list[Pipeline]:
        """All pipelines, newest first."""
        return await self._read("list_pipelines", tasks.list_pipelines)

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        """One pipeline, or ``NotFound``."""

        def get(c: Ctx) -> Pipeline:
            p = c.pipelines.get(c, pipeline_id)
            if p is None:
                from tracker_client.errors import NotFound

                raise NotFound(f"pipeline {pipeline_id} not found", code="not_found")
            return p.model()

        return await self._read("get_pipeline", get)

    # -- tasks ----------------------------------------------------------------------------------
    async def create_task(self, task: TaskCreate, *, idempotency_key: str | None = None) -> str:
        """Create a task in its pipeline's initial stage; returns its id. A parked claim
        waiting for work rides along: its claim runs in this same write (:mod:`.parked`)."""

        def create(c: Ctx) -> str:
            return idempotent(
                c,
                idempotency_key,
                "create_task",
                task,
                lambda: tasks.create_tasks(c, [task], bulk=False)[0],
                str,
                str,
            )

        return await self._create("create_task", create, 1)

    async def create_tasks(
        self, tasks_: Sequence[TaskCreate], *, idempotency_key: str | None = None
    ) -> list[str]:
        """Create many tasks, all or nothing; ids in input order (parked claims ride along,
        as on :meth:`create_task`)."""
        items = list(tasks_)

        def create(c: Ctx) -> list[str]:
            return idempotent(
                c,
                idempotency_key,
                "create_tasks",
                items,
                lambda: tasks.create_tasks(c, items, bulk=True),
                list,
                list,
            )

        return await self._create("create_tasks", create, len(items))

    async def _create(self, where: str, create: Callable[[Ctx], R], count: int) -> R:
        """The create's write, with the parked claims it takes along (:mod:`.parked`)."""
        riders = self._parked.board(count)
        if not riders:
            return await self._write(where, create)

        def op(c: Ctx) -> R:
            created = create(c)
            for rider in riders:
                rider.claim(c)
            return created

        try:
            created = await self._write(where, op)
        except BaseException:
            self._parked.landed(riders, committed=False)
            raise
        self._parked.landed(riders, committed=True)
        # The claims answer first (a pickup waits on them; the creator has its id already):
        # a few scheduling passes at most, never for a claim still finishing something else.
        await self._parked.answered(riders)
        return created

    async def list_tasks(
        self,
        *,
        stage: str | None = None,
        pipeline_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[Task]:
        """Tasks in creation order; ``next_cursor`` continues without skipping."""
        return await self._read(
            "list_tasks", lambda c: tasks.list_tasks(c, stage, pipeline_id, limit, cursor)
        )

    async def count_tasks(self, *, stage: str | None = None, pipeline_id: str | None = None) -> int:
        """How many tasks there are (in ``stage``, of ``pipeline_id``), without listing them."""
        return await self._read(
            "count_tasks", lambda c: c.scalar("tasks.count", (stage, pipeline_id))
        )

    async def get_task(self, task_id: str) -> TaskDetail:
        """The task with latest run, dependencies, assignments and available transitions."""
        return await self._read("get_task", lambda c: tasks.get_task(c, task_id))

    async def list_runs(self, task_id: str) -> list[Run]:
        """Every run of a task, by attempt."""
        return await self._read("list_runs", lambda c: tasks.list_runs(c, task_id))

    # -- leases and runs ------------------------------------------------------------------------
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
        limits = dict(per_state or {})

        def op(c: Ctx) -> Lease | None:
            return idempotent(
                c,
                idempotency_key,
                "claim",
                [agent_id, role, lease_ttl_ms, limits],
                lambda: claims.claim(c, agent_id, role, lease_ttl_ms, limits, idempotency_key),
                lambda lease: (
                    {"lease_id": lease.lease_id, "run_id": lease.run_id} if lease else None
                ),
                lambda rec: claims.reissue(c, rec["lease_id"], rec["run_id"], idempotency_key),
            )

        return await self._write("claim", op)

    async def heartbeat(
        self, lease: LeaseRef, *, lease_ttl_ms: int | None = None, checkpoint: Any = UNSET
    ) -> int:
        """Extend the lease by its own TTL (or ``lease_ttl_ms``); returns the new expiry.
        A ``checkpoint`` given replaces the run's in the same write."""
        digest = runs.token_hash(lease.lease_token.get_secret_value())
        return await self._write(
            "heartbeat",
            lambda c: claims.heartbeat(
                c, lease.lease_id, lease.run_id, digest, lease_ttl_ms, checkpoint
            ),
        )

    async def add_event(
        self, lease: LeaseRef, kind: str, data: Any = None, *, idempotency_key: str | None = None
    ) -> int:
        """Append an event to the lease's run; returns the event id."""
        digest = runs.token_hash(lease.lease_token.get_secret_value())
        run_id = lease.run_id
        return await self._write(
            "add_event",
            lambda c: idempotent(
                c,
                idempotency_key,
                "add_event",
                [run_id, digest, kind, data],
                lambda: runs.add_event(c, run_id, digest, kind, data),
                int,
                int,
            ),
        )

    async def list_events(
        self, run_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Event]:
        """A run's events in id order."""
        return await self._read(
            "list_events", lambda c: reads.list_events(c, "run_id", run_id, limit, cursor)
        )

    async def list_task_events(
        self, task_id: str, *, limit: int = 100, cursor: str | None = None, kind: str | None = None
    ) -> Page[Event]:
        """Every event of a task (all runs and task-level events) in id order; ``kind`` filters."""
        return await self._read(
            "list_task_events",
            lambda c: reads.list_events(c, "task_id", task_id, limit, cursor, kind),
        )

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
        ``wait_for``: the task then waits for these tasks (edges added in the same write)."""
        digest = runs.token_hash(lease.lease_token.get_secret_value())
        run_id = lease.run_id
        waits: Any = wait_for if isinstance(wait_for, str) else list(wait_for)  # a str: refused
        args = [run_id, digest, trigger, expected_stage, expected_task_version, instructions, usage]
        if waits:  # the key's fingerprint of a plain transition stays as it was
            args.append(waits)
        return await self._write(
            "transition",
            lambda c: idempotent(
                c,
                idempotency_key,
                "transition",
                args,
                lambda: runs.transition(
                    c,
                    run_id,
                    digest,
                    trigger,
                    expected_stage,
                    expected_task_version,
                    instructions,
                    usage,
                    waits,
                ),
                lambda r: r.model_dump(mode="json"),
                TransitionResult.model_validate,
            ),
        )

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

        ``retryable=False`` dead-letters the task at once (reason ``permanent_failure``).
        """
        digest = runs.token_hash(lease.lease_token.get_secret_value())
        run_id = lease.run_id
        return await self._write(
            "fail",
            lambda c: idempotent(
                c,
                idempotency_key,
                "fail",
                [run_id, digest, error, usage, retryable],
                lambda: runs.fail(c, run_id, digest, error, usage, self._rng, retryable),
                lambda r: r.model_dump(mode="json"),
                FailResult.model_validate,
            ),
        )

    # -- artifacts ------------------------------------------------------------------------------
    async def add_artifact(
        self, artifact: ArtifactCreate, *, idempotency_key: str | None = None
    ) -> str:
        """Record an artifact; ``NotFound`` for an unknown task or run id."""
        return await self._write(
            "add_artifact",
            lambda c: idempotent(
                c,
                idempotency_key,
                "add_artifact",
                artifact,
                lambda: reads.add_artifact(c, artifact),
                str,
                str,
            ),
        )

    async def list_artifacts(
        self,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Artifact]:
        """Artifacts in creation order."""
        return await self._read(
            "list_artifacts", lambda c: reads.list_artifacts(c, task_id, run_id, limit, cursor)
        )

    # -- operations -----------------------------------------------------------------------------
    async def queue_stats(
        self, *, near_expiry_ms: int | None = 60_000, stuck_ms: int = 300_000
    ) -> QueueStats:
        """Per-role queue figures."""
        return await self._read(
            "queue_stats", lambda c: stats.queue_stats(c, near_expiry_ms, stuck_ms)
        )

    # -- dependencies and assignments -----------------------------------------------------------
    async def add_dependency(
        self, task_id: str, depends_on_task_id: str, *, idempotency_key: str | None = None
    ) -> None:
        """Make ``task_id`` wait for ``depends_on_task_id``."""
        await self._write(
            "add_dependency",
            lambda c: idempotent(
                c,
                idempotency_key,
                "add_dependency",
                [task_id, depends_on_task_id],
                lambda: add_dependency(c, task_id, depends_on_task_id),
                no_answer,
                replay_none,
            ),
        )

    async def list_dependencies(self, task_id: str) -> list[Dependency]:
        """The task's dependencies and whether each is resolved now."""
        return await self._read("list_dependencies", lambda c: list_dependencies(c, task_id))

    async def assign(
        self,
        task_id: str,
        agent_id: str,
        *,
        assigned_by: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        """Make ``agent_id`` the only agent that may claim the task."""
        await self._write(
            "assign",
            lambda c: idempotent(
                c,
                idempotency_key,
                "assign",
                [task_id, agent_id, assigned_by],
                lambda: assign(c, task_id, agent_id, assigned_by),
                no_answer,
                replay_none,
            ),
        )

    async def list_assignments(self, task_id: str) -> list[Assignment]:
        """All assignments of a task, inactive ones included."""
        return await self._read("list_assignments", lambda c: list_assignments(c, task_id))

    async def unassign(
        self, task_id: str, agent_id: str, *, idempotency_key: str | None = None
    ) -> None:
        """Deactivate ``agent_id``'s active assignment, or ``NotFound``."""
        await self._write(
            "unassign",
            lambda c: idempotent(
                c,
                idempotency_key,
                "unassign",
                [task_id, agent_id],
                lambda: unassign(c, task_id, agent_id),
                no_answer,
                replay_none,
            ),
        )

    # -- release --------------------------------------------------------------------------------
    async def release(
        self,
        lease: LeaseRef,
        reason: str = "worker_shutdown",
        *,
        idempotency_key: str | None = None,
    ) -> ReleaseResult:
        """Give the lease's unfinished task back: the run ends ``released``, nothing counted."""
        digest = token_hash(lease.lease_token.get_secret_value())
        run_id = lease.run_id
        return await self._write(
            "release",
            lambda c: idempotent(
                c,
                idempotency_key,
                "release",
                [run_id, digest, reason],
                lambda: release(c, run_id, digest, reason),
                lambda r: r.model_dump(mode="json"),
                ReleaseResult.model_validate,
            ),
        )

    async def withdraw(self, lease: LeaseRef) -> bool:
        """Undo a lease claimed ahead and never handed out (``claim_ahead``,
        :mod:`tracker_client.ahead`): the task as if never claimed, no run left, its attempt
        count unchanged, so its next executor sees the attempt it would have seen. Only while
        the lease is still as claimed; False when it moved on (nothing written)."""
        digest = token_hash(lease.lease_token.get_secret_value())
        run_id = lease.run_id
        return await self._write("withdraw", lambda c: claims.withdraw(c, run_id, digest))

    # -- the store ------------------------------------------------------------------------------
    async def store_put(self, namespace: str, key: str, value: Any) -> None:
        """Upsert a value."""
        await self._write("store_put", lambda c: put(c, namespace, key, value))

    async def store_get(self, namespace: str, key: str) -> StoreEntry:
        """One entry, or ``NotFound``."""
        return await self._read("store_get", lambda c: get(c, namespace, key))

    async def store_delete(self, namespace: str, key: str) -> None:
        """Delete a key (absent keys are fine)."""
        await self._write("store_delete", lambda c: delete(c, namespace, key))

    async def store_list(self, namespace: str) -> list[StoreEntry]:
        """All entries of a namespace, sorted by key."""
        return await self._read("store_list", lambda c: list_namespace(c, namespace))

    async def store_delete_namespace(self, namespace: str) -> None:
        """Delete a whole namespace."""
        await self._write("store_delete_namespace", lambda c: delete_namespace(c, namespace))

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
        return await self._read(
            "store_search",
            lambda c: search(c, query, namespace, limit, filter_path, filter_value),
        )

    # -- schedules ------------------------------------------------------------------------------
    async def create_schedule(self, **fields: Any) -> Schedule:
        """Store a schedule (see :class:`~tracker_client.models.ScheduleCreate` for the
        fields); ``ValidationFailed``/``NotFound``/``Conflict`` name the field, nothing written."""
        return await self._write("create_schedule", lambda c: create(c, fields))

    async def list_schedules(self) -> list[Schedule]:
        """Every schedule, by name."""
        return await self._read(
            "list_schedules",
            lambda c: [schedule_from_row(r) for r in c.all("schedules.list")],
        )

    async def get_schedule(self, name: str) -> Schedule:
        """One schedule, or ``NotFound``."""
        return await self._read("get_schedule", lambda c: schedule_from_row(schedule_row(c, name)))

    async def pause_schedule(self, name: str) -> Schedule:
        """Stop firing ticks until resumed."""
        return await self._write("pause_schedule", lambda c: set_paused(c, name, True))

    async def resume_schedule(self, name: str) -> Schedule:
        """Fire again from the next tick after now (ticks while paused are not caught up)."""
        return await self._write("resume_schedule", lambda c: set_paused(c, name, False))

    async def delete_schedule(self, name: str) -> Schedule:
        """Remove a schedule (answers it as it was); its tasks stay."""
        return await self._write("delete_schedule", lambda c: remove_schedule(c, name))

    async def maintenance(self) -> MaintenanceReport:
        """The rail's maintenance, then the due schedule ticks (a cheap read first: a pass
        with nothing due writes nothing more)."""
        report = await self._sweep_and_purge()
        now = int(self._clock())
        due = await self._read("maintenance", lambda c: c.scalar("schedules.next_due"))
        if due is None or due > now:
            return report
        made = await self._write("schedule_tick", fire_due)
        return report.model_copy(update={"scheduled_tasks": made})

    # -- rate limits ----------------------------------------------------------------------------
    async def set_rate_limit(
        self, role: str, *, rate: str | None = None, max_running: int | None = None
    ) -> RateLimit:
        """Set ``role``'s fleet-wide rate (``"20/min"``) and/or cap of leased tasks."""
        return await self._write("set_rate_limit", lambda c: set_limit(c, role, rate, max_running))

    async def list_rate_limits(self) -> list[RateLimit]:
        """Every role's limit, by role, with its tokens, next token and leased tasks."""
        return await self._read("list_rate_limits", list_limits)

    async def clear_rate_limit(self, role: str) -> RateLimit:
        """Remove ``role``'s limit: its claims are no longer limited."""
        return await self._write("clear_rate_limit", lambda c: clear_limit(c, role))

    # -- following a task -----------------------------------------------------------------------
    async def follow_task(
        self, task_id: str, *, after: str | None = None, timeout_ms: int = 30_000, limit: int = 100
    ) -> TaskFollow:
        """The task's events after the cursor ``after`` (an event id; None: from the first),
        oldest first and at most ``limit``, as soon as there is one or the task is finished
        (terminal stage, dead-lettered, cancelled, expired), else after ``timeout_ms`` (at most
        60000) with none. Pass ``next_cursor`` back to go on; stop once ``finished``.

        ``NotFound`` for an unknown task; ``ValidationFailed`` for a bad cursor, timeout or limit.
        """
        check_follow(timeout_ms, limit)
        deadline = anyio.current_time() + timeout_ms / 1000
        changes = self._changes
        changes.followers += 1
        try:
            watch = await self._engine.follow(timeout_ms / 1000)
            while True:
                woken = changes.written
                answer = await self._read(
                    "follow_task",
                    _stamped(watch, lambda c: follow_state(c, task_id, after, limit)),
                )
                remaining = deadline - anyio.current_time()
                if answer.events or answer.finished or remaining <= 0:
                    return answer
                await watch.sleep(woken, remaining)
        finally:
            changes.followers -= 1

    # -- workers --------------------------------------------------------------------------------
    async def register_worker(self, worker_id: str, **fields: Any) -> WorkerInfo:
        """Register worker ``worker_id`` or refresh it (the fields of
        :class:`~tracker_client.observe_models.WorkerRegister`); last seen is now, by the
        rail's clock. ``ValidationFailed`` names a bad field, and nothing is written."""
        return await self._write("register_worker", lambda c: register(c, worker_id, fields))

    async def list_workers(self, state: str | None = None) -> list[WorkerInfo]:
        """The workers seen in the last 7 days with their state and runs (only ``state``
        ones: ``alive``, ``lost`` or ``stopped``)."""
        return await self._read("list_workers", lambda c: list_all(c, state))

    async def forget_worker(self, worker_id: str) -> WorkerInfo:
        """Remove a worker's registration (it comes back at its next refresh if it runs)."""
        return await self._write("forget_worker", lambda c: forget(c, worker_id))

    # -- spans ----------------------------------------------------------------------------------
    async def ingest_traces(self, document: Mapping[str, Any]) -> OtlpIngestResult:
        """Store the spans of an OTLP/JSON ``ExportTraceServiceRequest`` (``POST /v1/traces``
        with a JSON content type), linked to their task and run by the attributes
        ``nulltickets.task_id`` / ``nulltickets.run_id``. A document not of that shape is
        ``ValidationFailed`` naming the field, and nothing is stored."""
        # Off the event loop: a 4 MiB document takes ~0.2 s to read, which would hold up every
        # other request of a served rail (heartbeats included) for that long. Imported here: a
        # server's path, cold in a worker (issue 31, memory).
        from tracker_client.rules import otlpjson

        spans = await anyio.to_thread.run_sync(otlpjson.parse_traces, document)
        return await self._write("ingest_traces", lambda c: store_spans(c, spans))

    async def ingest_traces_collector(self, document: Mapping[str, Any]) -> OtlpIngestResult:
        """:meth:`ingest_traces` under the OpenTelemetry collector's path
        (``POST /otlp/v1/traces``)."""
        return await self.ingest_traces(document)

    async def ingest_trace_blob(self, data: bytes, content_type: str) -> OtlpIngestResult:
        """Keep an OTLP body of another content type (protobuf) as a blob, as NullTickets
        does: ``accepted_spans`` is 0 and no span is read from it."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ValidationFailed(f"data: expected bytes, got {type(data).__name__}")
        blob = bytes(data)
        if len(blob) > MAX_BLOB_BYTES:
            raise ValidationFailed(f"data: a blob of at most {MAX_BLOB_BYTES} bytes")
        kind = check_content_type(content_type)
        return await self._write("ingest_trace_blob", lambda c: store_blob(c, blob, kind))

    async def list_spans(
        self, task_id: str, *, run_id: str | None = None, limit: int | None = None
    ) -> list[Span]:
        """The spans ingested for ``task_id`` (only ``run_id``'s when given), by start time, at
        most ``limit`` (1..1000, default 1000). A task with no spans (or none the rail knows)
        has an empty list."""
        if not isinstance(task_id, str) or not task_id:
            raise ValidationFailed("task_id: must be a non-empty string")
        if run_id is not None and not isinstance(run_id, str):
            raise ValidationFailed(f"run_id: expected a string, got {run_id!r}")
        count = span_limit(limit)
        return await self._read(
            "list_spans", lambda c: list_task_spans(c, task_id, run_id or None, count)
        )

    # -- agents ---------------------------------------------------------------------------------
    async def checkpoint(self, lease: LeaseRef, data: Any) -> None:
        """Replace the run's checkpoint with ``data`` (at most 64 KiB of JSON)."""
        digest = token_hash(lease.lease_token.get_secret_value())
        run_id = lease.run_id

        def op(c: Ctx) -> None:
            task = check_lease(c, run_id, digest)
            write_checkpoint(c, task, run_id, data)

        await self._write("checkpoint", op)

    async def list_upstream(self, task_id: str) -> list[Upstream]:
        """Each dependency of the task: stage, outcome, last ``result`` and artifacts."""
        return await self._read("list_upstream", lambda c: list_upstream(c, task_id))

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
        """Move a task waiting at a human step along ``trigger`` (see the protocol)."""
        args = [task_id, trigger, expected_stage, expected_task_version, instructions]
        return await self._write(
            "transition_task",
            lambda c: idempotent(
                c,
                idempotency_key,
                "transition_task",
                args,
                lambda: transition_task(
                    c, task_id, trigger, expected_stage, expected_task_version, instructions
                ),
                lambda r: r.model_dump(mode="json"),
                TransitionResult.model_validate,
            ),
        )

    # -- claim_many -----------------------------------------------------------------------------
    async def claim_many(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        *,
        concurrency: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
    ) -> list[Lease]:
        """Up to ``n`` leases of ``agent_role`` in one write (empty: no work); a replay with
        the key answers the same leases (the same tokens; one gone since is left out).

        The arguments are the body's (``ClaimManyBody``), so every rail answers
        ``call("claim_many", ...)`` alike; ``concurrency`` is ``{"per_state": {stage: n}}``."""
        limits = per_state_of(dict(concurrency) if concurrency is not None else None)
        op = self._claim_many_op(agent_id, agent_role, lease_ttl_ms, n, limits, idempotency_key)
        return await self._write("claim_many", op)

    @staticmethod
    def _claim_many_op(
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        limits: Mapping[str, int] | None,
        idempotency_key: str | None,
        *,
        record_empty: bool = True,
    ) -> Callable[[Ctx], list[Lease]]:
        """:meth:`claim_many`'s write, to run in a transaction (``record_empty=False``: a
        claim that leased nothing records nothing under the key)."""

        def op(c: Ctx) -> list[Lease]:
            return keyed_claim_many(
                c,
                claim_many,
                idempotency_key,
                agent_id,
                agent_role,
                lease_ttl_ms,
                n,
                limits,
                record_empty=record_empty,
            )

        return op

    # -- parked claims (extension ``parked_claim``: see :mod:`.parked`) --------------------------
    #: Whether a parked claim waits without a write or a poll (the PostgreSQL rail's idle
    #: look says yes): :attr:`~tracker_client.protocol.ParksClaims.quiet_parks`.
    quiet_parks = False
    #: Whether a parked claim's attempt that leased nothing is recorded under its key (the
    #: rail's ``claim_many``); the SQLite rail's is not (:meth:`_parked_attempt`).
    _parked_empty_recorded = True

    async def _parked_attempt(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        concurrency: Mapping[str, object] | None,
        key: str,
    ) -> list[Lease]:
        """One attempt of a parked claim, under its key: the rail's :meth:`claim_many`, or
        where :attr:`_parked_empty_recorded` is false one that records nothing when it leased
        nothing (an idle round's empty look then commits nothing, :mod:`.parked`)."""
        if self._parked_empty_recorded:
            return await self.claim_many(
                agent_id, agent_role, lease_ttl_ms, n, concurrency=concurrency, idempotency_key=key
            )
        limits = per_state_of(dict(concurrency) if concurrency is not None else None)
        op = self._claim_many_op(
            agent_id, agent_role, lease_ttl_ms, n, limits, key, record_empty=False
        )
        return await self._write("claim_many", op)

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
        """``claim_many`` that waits up to ``wait_ms`` for work and leases it as it comes
        (empty: none came, or cancelled); the key is required: a retry under it answers the
        same leases, :meth:`cancel_parked_claim` under it gives back what it leased."""
        key = check_parked(idempotency_key, wait_ms)
        return await self._park_claim(
            key, agent_id, agent_role, lease_ttl_ms, n, wait_ms / 1000, concurrency
        )

    async def _park_claim(
        self,
        key: str,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        wait_s: float,
        concurrency: Mapping[str, object] | None,
        *,
        recorded: int | None = None,
    ) -> list[Lease]:
        """:meth:`parked_claim` of a checked ``key``; ``recorded``: how many attempts of the
        key the rail has recorded, when the caller has just read it (None: read it first).
        An engine that waits for work its own way (the PostgreSQL rail's idle look,
        :mod:`tracker_client.postgres.idle`) hands the claim over here once work may have come."""

        def claim(k: str) -> Awaitable[list[Lease]]:
            return self._parked_attempt(agent_id, agent_role, lease_ttl_ms, n, concurrency, k)

        limits = per_state_of(dict(concurrency) if concurrency is not None else None)
        empty_recorded = self._parked_empty_recorded

        def ride(c: Ctx, k: str) -> list[Lease]:
            return keyed_claim_many(
                c,
                claim_many,
                k,
                agent_id,
                agent_role,
                lease_ttl_ms,
                n,
                limits,
                record_empty=empty_recorded,
            )

        def count(c: Ctx) -> int:
            i = 0
            while c.scalar("idempotency.recorded", (attempt_key(key, i), "claim_many")):
                i += 1
            return i

        async def attempts() -> int:
            return await self._read("parked_claim", count) if recorded is None else recorded

        changes = self._changes
        return await self._parked.park(
            key,
            wait_s,
            claim=claim,
            mark=lambda: str(changes.seq),
            wait_for_work=lambda timeout_s, since: self.wait_for_work(timeout_s, since=since),
            recorded=attempts,
            give_back=self._give_back,
            ride=ride,
            n=n,
            empty_recorded=empty_recorded,
        )

    async def cancel_parked_claim(self, *, idempotency_key: str | None = None) -> ParkedCancelled:
        """Stop the parked claim of ``idempotency_key`` (it leases nothing more) and release
        what it leased that its caller did not take (no attempt counted)."""
        key = check_parked(idempotency_key, 0)
        return ParkedCancelled(released=await self._parked.cancel(key, self._give_back))

    async def _give_back(self, lease: Lease) -> None:
        await self.release(lease, "claim_cancelled")

    # -- finish ---------------------------------------------------------------------------------
    async def finish(
        self,
        lease: LeaseRef,
        *,
        events: Sequence[Part] = (),
        transition: Part | None = None,
        fail: Part | None = None,
        idempotency_key: str | None = None,
    ) -> FinishResult:
        """Write ``events`` (``{kind, data}`` each) and then ``transition`` (``transition``'s
        fields) or ``fail`` (``fail``'s), all or nothing, in one write."""
        parts = prepare(events, transition, fail)
        digest = runs.token_hash(lease.lease_token.get_secret_value())
        run_id = lease.run_id
        return await self._write(
            "finish",
            lambda c: finish_keyed(c, run_id, digest, parts, self._rng, idempotency_key),
        )

    # -- finish_many ----------------------------------------------------------------------------
    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """Write each item as ``finish`` would, in one transaction; per item, its
        :class:`~tracker_client.contract.batch_models.FinishResult` or the error that
        refused it (that item alone written nothing), in the items' order."""
        return await self._write("finish_many", self._finish_many_op(items))

    def _finish_many_op(
        self, items: Sequence[FinishItem]
    ) -> Callable[[Ctx], list[FinishManyOutcome]]:
        """:meth:`finish_many`'s write, to run in a transaction (the items checked and
        prepared first, here: a bad call is refused before anything is queued)."""
        check_items(items)
        prepared = [prepared_item(item) for item in items]
        keys = [item.idempotency_key for item in items]
        rng = self._rng

        def op(ctx: Ctx) -> list[FinishManyOutcome]:
            return write_items(ctx, prepared, keys, rng)

        return op

    # -- backlog operations ---------------------------------------------------------------------
    async def cancel(
        self, task_id: str, *, reason: str = "cancelled", idempotency_key: str | None = None
    ) -> CancelResult:
        """Make a waiting task unclaimable, or revoke a running task's lease (a retry with the
        same ``idempotency_key`` gets the first answer)."""
        # an operator's call: its rules and answer are imported here (issue 31)
        from tracker_client.ops_models import CancelResult
        from tracker_client.rules import backlog

        return await self._write(
            "cancel",
            lambda c: idempotent(
                c,
                idempotency_key,
                "cancel",
                [task_id, reason],
                lambda: backlog.cancel(c, task_id, reason),
                _dump,
                CancelResult.model_validate,
            ),
        )

    async def cancel_all(
        self,
        *,
        pipeline_id: str | None = None,
        role: str | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """Cancel every waiting and running task of a pipeline and/or role; returns the count
        (a retry with the same ``idempotency_key`` gets the first count)."""
        from tracker_client.rules import backlog  # an operator's or a producer's call (issue 31)

        return await self._write(
            "cancel_all",
            lambda c: idempotent(
                c,
                idempotency_key,
                "cancel_all",
                [pipeline_id, role],
                lambda: backlog.cancel_all(c, pipeline_id, role),
                int,
                int,
            ),
        )

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
        # an operator's call: its rules and answer are imported here (issue 31)
        from tracker_client.ops_models import RequeueResult
        from tracker_client.rules import backlog

        return await self._write(
            "requeue",
            lambda c: idempotent(
                c,
                idempotency_key,
                "requeue",
                [task_id, stage, reset_attempts],
                lambda: backlog.requeue(c, task_id, stage, reset_attempts),
                _dump,
                RequeueResult.model_validate,
            ),
        )

    async def requeue_all(
        self,
        *,
        pipeline_id: str,
        reason: str | None = None,
        since_ms: int | None = None,
        stage: str | None = None,
        dry_run: bool = False,
        reset_attempts: bool = True,
    ) -> RequeueAllResult:
        """Requeue every dead-lettered task of a pipeline (dead-lettered for ``reason``, within
        the last ``since_ms``), each as :meth:`requeue` would, a bounded batch per transaction;
        ``dry_run`` only counts. The input is checked before anything is written."""
        # an operator's call: its rules and answer are imported here (issue 31)
        from tracker_client.ops_models import RequeueAllResult
        from tracker_client.rules import backlog

        def check(c: Ctx) -> tuple[backlog.DeadLetters, dict[str, int]]:
            chosen = backlog.dead_letters(c, pipeline_id, reason, since_ms, stage)
            return chosen, backlog.count_dead_letters(c, chosen)

        chosen, counted = await self._read("requeue_all", check)
        done, batches = Counter(counted if dry_run else {}), 0
        after: int | None = 0
        while not dry_run and after is not None:
            job = functools.partial(
                backlog.requeue_batch, chosen=chosen, after_seq=after, reset_attempts=reset_attempts
            )
            batch, after = await self._write("requeue_all", job)
            done.update(batch)
            batches += 1
        return RequeueAllResult(
            pipeline_id=pipeline_id,
            requeued=sum(done.values()),
            by_reason=dict(sorted(done.items())),
            dry_run=bool(dry_run),
            batches=batches,
        )


def _dump(answer: BaseModel) -> dict[str, Any]:
    """An answer model as its idempotency record stores it (JSON)."""
    return answer.model_dump(mode="json")


def _stamped(watch: Watch, fn: Callable[[Ctx], R]) -> Callable[[Ctx], R]:
    """``fn``, noting the engine's change marker first, in the same read (see ``Watch``)."""

    def read(c: Ctx) -> R:
        watch.stamp()
        return fn(c)

    return read
