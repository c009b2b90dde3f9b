"""The agent operations of one run (``ctx.store``, ``ctx.spawn``, checkpoints, upstream) over
its :class:`~worker.lease.LeaseSession`.

Each call goes through the session's :class:`~worker.retry.TrackerCalls` (retried within the
lease's remaining time; a fresh idempotency key per logical write where the write takes one:
creating a subtask) and the session's scrubber (known secrets masked in what is written). The
rail-specific choices (the extension or the plain-NullTickets way) are
:mod:`tracker_client.agents`'s, one function per operation.

Why the whole :class:`~tracker_client.protocol.Tracker` here, from the session's
:class:`~tracker_client.protocol.RailParts` (chosen once, at the worker's start), instead of
widening the worker's :class:`~tracker_client.protocol.LeaseTracker`: the lease seam stays what
every worker needs (a lease-only session still runs tasks), and only a run whose executor
asks for the store or a subtask needs the rail's contract calls; the KV store and task creation
are the rail's public API, used with the worker's own credentials, never handed to a child.
Checkpoints are the lease's (``heartbeat(checkpoint=)``/``checkpoint``) and need no more than
the lease seam on a rail with the extension.

Checkpoint pacing: :meth:`AgentCalls.keep_checkpoint` only keeps the latest value; the keeper's
next heartbeat carries it, or its flush writes it on its own once
:data:`CHECKPOINT_INTERVAL_S` passed since the last write, and the final report writes a
pending one first. So a checkpoint per loop iteration costs no tracker write.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from tracker_client import agents
from tracker_client.agent_models import UNSET, Upstream
from tracker_client.errors import NotFound, Unsupported
from tracker_client.models import StoreEntry, TransitionResult

if TYPE_CHECKING:
    from tracker_client.capabilities import LeaseRef
    from tracker_client.models import Lease
    from tracker_client.protocol import LeaseTracker, RailParts, Tracker
    from worker.retry import TrackerCalls
    from worker.scrub import RunScrubber


class LeaseSession(Protocol):
    """What the agent calls use of the run's :class:`worker.lease.LeaseSession` (typed here so
    this module doesn't import the session that builds it)."""

    tracker: LeaseTracker
    parts: RailParts | None
    lease: Lease
    ref: LeaseRef
    calls: TrackerCalls

    @property
    def scrub(self) -> RunScrubber:
        """The run's scrubber of known secrets."""
        ...

    def remaining_s(self) -> float:
        """Seconds the lease is still ours."""
        ...


__all__ = ["CHECKPOINT_INTERVAL_S", "AgentCalls"]

#: The least time between two checkpoint writes of one run that are not heartbeats.
CHECKPOINT_INTERVAL_S = 5.0


class AgentCalls:
    """The agent operations of one run: the worker's :class:`~worker.run.SessionSink` calls."""

    def __init__(self, session: LeaseSession) -> None:
        """Write through ``session`` (its retry budget, keys and scrubbing)."""
        self._session = session
        self._pending: Any = UNSET
        self._written_at = time.monotonic()

    def rail(self, call: str) -> Tracker:
        """The whole rail, for ``call``; ``Unsupported`` naming it when the worker's tracker is
        a lease seam only."""
        parts = self._session.parts
        if parts is None:
            raise Unsupported(
                f"{call}: the worker's tracker ({type(self._session.tracker).__name__}) has no "
                "store or task operations"
            )
        return parts.rail

    def _budget(self) -> float:
        return self._session.remaining_s()

    # -- the store ------------------------------------------------------------------------------
    async def store_get(self, namespace: str, key: str) -> Any:
        """The value, or None when absent."""
        rail = self.rail("ctx.store.get")
        try:
            entry = await self._session.calls.read(
                "store_get", lambda: rail.store_get(namespace, key), budget_s=self._budget()
            )
        except NotFound:
            return None
        return entry.value

    async def store_put(self, namespace: str, key: str, value: Any) -> None:
        """Upsert (scrubbed of known secrets; replacing is idempotent, so no key)."""
        rail = self.rail("ctx.store.put")
        clean = self._session.scrub.get().data(value)
        await self._session.calls.read(
            "store_put", lambda: rail.store_put(namespace, key, clean), budget_s=self._budget()
        )

    async def store_delete(self, namespace: str, key: str) -> None:
        """Delete a key."""
        rail = self.rail("ctx.store.delete")
        await self._session.calls.read(
            "store_delete", lambda: rail.store_delete(namespace, key), budget_s=self._budget()
        )

    async def store_list(self, namespace: str) -> list[StoreEntry]:
        """A namespace's entries."""
        rail = self.rail("ctx.store.list")
        return await self._session.calls.read(
            "store_list", lambda: rail.store_list(namespace), budget_s=self._budget()
        )

    async def store_search(
        self, query: str, *, namespace: str | None, limit: int
    ) -> list[StoreEntry]:
        """The rail's full-text search."""
        rail = self.rail("ctx.store.search")
        return await self._session.calls.read(
            "store_search",
            lambda: rail.store_search(query, namespace=namespace, limit=limit),
            budget_s=self._budget(),
        )

    # -- subtasks and upstream ------------------------------------------------------------------
    async def spawn(self, pipeline: str, fields: Mapping[str, Any]) -> str:
        """Create a child of the run's task; ``ValueError`` naming a field the rail's task
        model refuses, ``NotFound`` naming an unknown pipeline (nothing written either way)."""
        # a worker never builds it: created on first use (tracker_client.cold_models)
        from tracker_client.models import TaskCreate

        rail = self.rail("ctx.spawn")
        session = self._session
        pipeline_id = await session.calls.read(
            "list_pipelines", lambda: agents.pipeline_id_of(rail, pipeline), budget_s=self._budget()
        )
        scrub = session.scrub.get()
        clean = {
            k: scrub.text(v) if isinstance(v, str) else scrub.data(v) for k, v in fields.items()
        }
        try:
            task = TaskCreate(pipeline_id=pipeline_id, **clean)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
            )
            raise ValueError(f"ctx.spawn: bad subtask: {problems}; nothing written") from None
        parent = session.lease.task.id
        return await session.calls.write(
            "create_task",
            lambda key: agents.spawn(rail, task, parent_id=parent, idempotency_key=key),
            budget_s=self._budget(),
        )

    async def transition_waiting(
        self, trigger: str, wait_for: tuple[str, ...], **fields: Any
    ) -> TransitionResult:
        """The run's transition, the task then waiting for ``wait_for`` (one write where the
        rail has ``fan_in``; see :func:`tracker_client.agents.transition_waiting`)."""
        tracker = self._session.tracker
        ref = self._session.ref
        parts = self._session.parts
        if parts is not None:
            return await agents.transition_waiting(parts.rail, ref, trigger, wait_for, **fields)
        return await tracker.transition(ref, trigger, wait_for=wait_for, **fields)

    async def read_upstream(self) -> list[Upstream]:
        """The run's task's dependencies as they ended."""
        rail = self.rail("ctx.upstream")
        task_id = self._session.lease.task.id
        return await self._session.calls.read(
            "list_upstream", lambda: agents.upstream_of(rail, task_id), budget_s=self._budget()
        )

    async def upstream_at_start(self) -> list[Upstream] | None:
        """The upstream a run at a later stage starts with (None on a lease-only seam, which
        has no task reads)."""
        if self._session.parts is None:
            return None
        return await self.read_upstream()

    async def previous_checkpoint(self) -> Any:
        """The latest checkpoint of the task's earlier runs: the claim's (no read at all on a
        rail with the extension), else the plain rail's KV entry (one read); None without."""
        session = self._session
        lease = session.lease
        if lease.previous_checkpoint is not None or lease.run.attempt <= 1:
            return lease.previous_checkpoint
        tracker = session.tracker
        if "checkpoints" in (await tracker.capabilities()).extensions:
            return None
        parts = session.parts
        if parts is None:
            return None
        rail = parts.rail
        return await self._session.calls.read(
            "previous_checkpoint",
            lambda: agents.previous_checkpoint(rail, lease),
            budget_s=self._budget(),
        )

    # -- checkpoints ----------------------------------------------------------------------------
    def keep_checkpoint(self, data: Any) -> None:
        """Keep ``data`` (already checked) as the checkpoint to write next; latest wins. Kept
        by reference: a value changed after the call is written as it is then (and checked
        again by the rail's limit)."""
        self._pending = data

    @property
    def checkpoint_pending(self) -> bool:
        """Whether a kept checkpoint waits to be written."""
        return self._pending is not UNSET

    def checkpoint_due(self) -> bool:
        """Whether a pending checkpoint should be written without waiting for a heartbeat."""
        return (
            self._pending is not UNSET
            and time.monotonic() - self._written_at >= CHECKPOINT_INTERVAL_S
        )

    def take_checkpoint(self) -> Any:
        """The pending checkpoint (UNSET: none), now no longer pending."""
        data, self._pending = self._pending, UNSET
        if data is not UNSET:
            self._written_at = time.monotonic()
        return data

    def restore_checkpoint(self, data: Any) -> None:
        """Put back a checkpoint whose write failed, unless a newer one was kept meanwhile."""
        if self._pending is UNSET:
            self._pending = data

    async def write_checkpoint(self, data: Any, *, heartbeat: bool, ttl_ms: int | None) -> Any:
        """Write ``data`` (scrubbed now: only what is written pays for it; with a heartbeat, its
        new expiry is answered). The lease seam's own operations where the rail has the
        extension; else :func:`tracker_client.agents.save_checkpoint`'s KV way."""
        session = self._session
        tracker, ref = session.tracker, session.ref
        clean = session.scrub.get().data(data)
        if "checkpoints" in (await tracker.capabilities()).extensions:
            if heartbeat:
                return await tracker.heartbeat(ref, lease_ttl_ms=ttl_ms, checkpoint=clean)
            await tracker.checkpoint(ref, clean)
            return None
        rail = self.rail("ctx.checkpoint")
        return await agents.save_checkpoint(
            rail, ref, clean, heartbeat=heartbeat, lease_ttl_ms=ttl_ms
        )
