"""``EmbeddedTracker``: the :class:`~tracker_client.protocol.Tracker` on a local SQLite file.

The operations: each validates nothing itself but hands one function of :mod:`.tasks`,
:mod:`.claims`, :mod:`.runs`, ... to :class:`~.core.TrackerCore`, wrapped in the idempotency
record where the operation takes a key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tracker_client.agent_models import UNSET
from tracker_client.capabilities import EMBEDDED, Capabilities, LeaseRef
from tracker_client.contract import table as contract
from tracker_client.models import (
    Artifact,
    ArtifactCreate,
    Event,
    FailResult,
    Lease,
    Page,
    Pipeline,
    QueueStats,
    Run,
    Task,
    TaskCreate,
    TaskDetail,
    TransitionResult,
)
from tracker_client.rules import claims, reads, runs, stats, tasks
from tracker_client.rules.agents import AgentOps
from tracker_client.rules.backlog_ops import BacklogOps
from tracker_client.rules.claim_many import ClaimManyOps
from tracker_client.rules.common import Ctx
from tracker_client.rules.finish import FinishOps
from tracker_client.rules.finish_many import FinishManyOps
from tracker_client.rules.follow import FollowOps
from tracker_client.rules.idempotency import idempotent
from tracker_client.rules.links import LinkOps
from tracker_client.rules.ratelimit_ops import RateLimitOps
from tracker_client.rules.release import ReleaseOps
from tracker_client.rules.schedules import ScheduleOps
from tracker_client.rules.spans import SpanOps
from tracker_client.rules.store import StoreOps
from tracker_client.rules.workers import WorkerOps

__all__ = ["EmbeddedTracker"]

R = TypeVar("R")
Clock = Callable[[], int]


#: What the embedded rail declares: :data:`~tracker_client.capabilities.EMBEDDED`'s powers and
#: every extension of the wire contract (it implements each operation of the table).
_CAPABILITIES = replace(EMBEDDED, extensions=frozenset(contract.EXTENSIONS))


class EmbeddedTracker(
    LinkOps,
    ReleaseOps,
    StoreOps,
    ScheduleOps,
    RateLimitOps,
    FollowOps,
    WorkerOps,
    SpanOps,
    AgentOps,
    ClaimManyOps,
    FinishOps,
    FinishManyOps,
    BacklogOps,
):
    """The embedded SQLite tracker. Create it with ``await EmbeddedTracker.open(path)``."""

    async def capabilities(self) -> Capabilities:
        """Every rule of the backlog semantics (docs/guarantees/backlog.md), in process.

        Every write commits and answers in the caller's process, and an error means nothing was
        committed, so an answer is never lost: callers need no idempotency keys (they still work).
        """
        return _CAPABILITIES

    async def call(self, operation: str, *params: str, **arguments: Any) -> Any:
        """The operation of the contract table called ``operation`` (see the protocol)."""
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
        """Create a task in its pipeline's initial stage; returns its id."""
        return await self._write(
            "create_task",
            lambda c: idempotent(
                c,
                idempotency_key,
                "create_task",
                task,
                lambda: tasks.create_tasks(c, [task], bulk=False)[0],
                str,
                str,
            ),
        )

    async def create_tasks(
        self, tasks_: Sequence[TaskCreate], *, idempotency_key: str | None = None
    ) -> list[str]:
        """Create many tasks, all or nothing; ids in input order."""
        items = list(tasks_)
        return await self._write(
            "create_tasks",
            lambda c: idempotent(
                c,
                idempotency_key,
                "create_tasks",
                items,
                lambda: tasks.create_tasks(c, items, bulk=True),
                list,
                list,
            ),
        )

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
