"""The lease and run calls of the remote client, as :class:`RunCalls`, a base of
:class:`~tracker_client.nulltickets.client.RemoteTracker`: what a worker sends while it works.

``claim``, ``parked_claim`` (:mod:`.parking`), ``heartbeat``, ``add_event``, ``transition``,
``fail`` and ``release`` (each under a lease: its quirks on a plain NullTickets server are in
:mod:`.leases`) and the reads of a run's events (:mod:`.reads`). They are the worker's hot
path, apart from the admin and producer side that the client itself holds; each method is one
call into the module that handles it, so a request costs no more than it did on the client.
May touch: the wire only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tracker_client.agent_models import UNSET
from tracker_client.capabilities import LeaseRef
from tracker_client.contract.parked_models import ParkedCancelled
from tracker_client.models import Event, FailResult, Lease, Page, ReleaseResult, TransitionResult
from tracker_client.nulltickets import leases, parking, reads
from tracker_client.nulltickets.wire import Wire

__all__ = ["RunCalls"]


class RunCalls:
    """The lease and run operations of the remote client (over its ``_wire``)."""

    _wire: Wire

    async def claim(
        self,
        agent_id: str,
        role: str,
        lease_ttl_ms: int,
        *,
        per_state: Mapping[str, int] | None = None,
        idempotency_key: str | None = None,
    ) -> Lease | None:
        """``POST /leases/claim`` with a fresh key per call; None on 204 (no work).

        The TTL must be 1..86,400,000 ms; on a NullTickets server one over 300 s is clamped.
        """
        return await leases.claim(
            self._wire, agent_id, role, lease_ttl_ms, per_state, idempotency_key
        )

    #: A served parked claim waits in the server (an HTTP request held open): an idle worker
    #: parks with its plain back-off (:attr:`~tracker_client.protocol.ParksClaims.quiet_parks`).
    quiet_parks = False

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
        """``POST /leases/claim-parked`` (extension ``parked_claim``): up to ``n`` leases,
        waiting up to ``wait_ms`` for work; cancelled or unanswered, it is cancelled at the
        server under its key (:mod:`.parking`)."""
        body = {
            "agent_id": agent_id,
            "agent_role": agent_role,
            "lease_ttl_ms": lease_ttl_ms,
            "n": n,
        }
        return await parking.parked_claim(self._wire, body, wait_ms, concurrency, idempotency_key)

    async def cancel_parked_claim(self, *, idempotency_key: str | None = None) -> ParkedCancelled:
        """``POST /leases/claim-parked/cancel``: stop the parked claim of the key and release
        what it leased."""
        return await parking.cancel_parked_claim(self._wire, idempotency_key)

    async def heartbeat(
        self, lease: LeaseRef, *, lease_ttl_ms: int | None = None, checkpoint: Any = UNSET
    ) -> int:
        """``POST /leases/{lease_id}/heartbeat`` (no idempotency key); the new expiry. A
        NullTickets server always answers now + 300 s, and has no checkpoints."""
        return await leases.heartbeat(self._wire, lease, lease_ttl_ms, checkpoint)

    async def add_event(
        self, lease: LeaseRef, kind: str, data: Any = None, *, idempotency_key: str | None = None
    ) -> int:
        """``POST /runs/{run_id}/events``; data over the size budget is trimmed with a marker."""
        return await leases.add_event(self._wire, lease, kind, data, idempotency_key)

    async def list_events(
        self, run_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Event]:
        """``GET /runs/{run_id}/events``; cursor rebuilt from the last item."""
        return await reads.list_events(self._wire, run_id, limit, cursor)

    async def list_task_events(
        self, task_id: str, *, limit: int = 100, cursor: str | None = None, kind: str | None = None
    ) -> Page[Event]:
        """Every event of the task, or those of one ``kind`` (served tracker only)."""
        return await reads.list_task_events(self._wire, task_id, limit, cursor, kind)

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
        """``POST /runs/{run_id}/transition``; an invalid trigger lists the allowed ones.
        ``wait_for`` needs the ``fan_in`` extension (``Unsupported`` before anything is sent)."""
        fields = {
            "expected_stage": expected_stage,
            "expected_task_version": expected_task_version,
            "instructions": instructions,
            "usage": usage,
            "wait_for": wait_for if isinstance(wait_for, str) else list(wait_for),
        }
        return await leases.transition(self._wire, lease, trigger, fields, idempotency_key)

    async def fail(
        self,
        lease: LeaseRef,
        error: str,
        *,
        usage: Any = None,
        retryable: bool = True,
        idempotency_key: str | None = None,
    ) -> FailResult:
        """``POST /runs/{run_id}/fail``; what happened next is read back from the task when the
        server does not say (NullTickets). ``retryable=False`` dead-letters at once on the
        served tracker; NullTickets ignores it."""
        return await leases.fail(self._wire, lease, error, usage, retryable, idempotency_key)

    async def release(
        self,
        lease: LeaseRef,
        reason: str = "worker_shutdown",
        *,
        idempotency_key: str | None = None,
    ) -> ReleaseResult:
        """``POST /runs/{run_id}/release`` (served tracker): claimable again at once, no attempt
        counted. A plain server has no such route and its ``fail`` counts an attempt, so nothing
        is sent there: the lease is left to expire (``released=False``)."""
        return await leases.release(self._wire, lease, reason, idempotency_key)
