"""Lease-authenticated operations of the NullTickets client: claim, heartbeat, events, finish.

The lease token *replaces* the admin token on heartbeat, events, transition and fail. A claim gets
a fresh idempotency key per call (a cached 204 is never replayed) that its retries reuse (a lost
claim answer comes back as the same lease); heartbeats carry no key (a replayed key would return
an old expiry without extending). 404/410/401 on these routes mean the lease is lost.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter

from tracker_client.capabilities import LeaseRef
from tracker_client.errors import (
    InvalidTransition,
    TrackerError,
    TrackerUnavailable,
    ValidationFailed,
)
from tracker_client.models import (
    Event,
    FailResult,
    Lease,
    Page,
    ReleaseResult,
    TransitionResult,
)
from tracker_client.nulltickets.base import NULLTICKETS_LEASE_TTL_MS, log
from tracker_client.nulltickets.core import MAX_LEASE_TTL_MS, RemoteCore, item_cursor
from tracker_client.nulltickets.limits import HEADER_ALLOWANCE, trim_event_data
from tracker_client.nulltickets.transport import check_json, encode_query, loads
from tracker_client.nulltickets.transport import quote_segment as seg

__all__ = ["RemoteLeases"]

_EVENT_PAGE = TypeAdapter(Page[Event])


class RemoteLeases(RemoteCore):
    """Claim, heartbeat, run events, transition and fail over HTTP."""

    # -- leases and runs ----------------------------------------------------------------------
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

        The TTL must be 1..86,400,000 ms (the server would accept 0 or negative and hand out a
        lease that is already expired). On a NullTickets server a TTL over 300 s is clamped:
        its first heartbeat would cut the lease to 300 s anyway.
        """
        if not 1 <= lease_ttl_ms <= MAX_LEASE_TTL_MS:
            raise ValidationFailed(
                f"claim: lease_ttl_ms must be 1..{MAX_LEASE_TTL_MS}, got {lease_ttl_ms}",
                code="invalid_lease_ttl",
            )
        await self._capabilities()
        cap = self.max_lease_ttl_ms
        if cap is not None and lease_ttl_ms > cap:
            self._warn_once(
                "lease_ttl_clamped",
                f"lease_ttl_ms {lease_ttl_ms} clamped to {cap}: the NullTickets server resets "
                "every lease to 300 s on heartbeat",
            )
            lease_ttl_ms = cap
        body: dict[str, Any] = {
            "agent_id": agent_id,
            "agent_role": role,
            "lease_ttl_ms": lease_ttl_ms,
        }
        if per_state:
            body["concurrency"] = {"per_state": dict(per_state)}
        response = await self._call(
            "POST", "/leases/claim", body=body, idempotency_key=self._key(idempotency_key)
        )
        if response.status_code == 204 or not response.content:
            return None
        return self._parse(Lease, loads(response, "POST /leases/claim"), "POST /leases/claim")

    async def heartbeat(self, lease: LeaseRef, *, lease_ttl_ms: int | None = None) -> int:
        """``POST /leases/{lease_id}/heartbeat`` with the lease token and no idempotency key.

        Returns the server's new expiry. A NullTickets server always answers now + 300 s.
        """
        # NullTickets ignores the body; the served tracker uses the TTL, and the run id to tell
        # why a lease is gone (revoked by a cancel, expired) when the lease row no longer exists.
        body: dict[str, Any] = {"run_id": lease.run_id}
        if lease_ttl_ms is not None:
            body["lease_ttl_ms"] = lease_ttl_ms
        doc = await self._json(
            "POST",
            f"/leases/{seg(lease.lease_id)}/heartbeat",
            body=body,
            auth="lease",
            lease_token=lease.lease_token.get_secret_value(),
            lease_route=True,
        )
        expires = doc.get("expires_at_ms") if isinstance(doc, dict) else None
        if not isinstance(expires, int):
            raise TrackerUnavailable(
                "POST /leases/{id}/heartbeat: answer without expires_at_ms",
                code="invalid_response",
            )
        wanted = lease_ttl_ms or (
            lease.expires_at_ms - lease.run.started_at_ms if isinstance(lease, Lease) else 0
        )
        if (
            wanted > NULLTICKETS_LEASE_TTL_MS
            and expires < int(time.time() * 1000) + wanted - 60_000
        ):
            self._warn_once(
                "lease_ttl_reset",
                "the tracker reset the lease to about 300 s on heartbeat (NullTickets does this "
                "whatever TTL was asked): heartbeat at least every 100 s",
                task_id=lease.task_id,
                run_id=lease.run_id,
            )
        return expires

    async def add_event(
        self, lease: LeaseRef, kind: str, data: Any = None, *, idempotency_key: str | None = None
    ) -> int:
        """``POST /runs/{run_id}/events``; data over the size budget is trimmed with a marker."""
        check_json(data, f"event {kind!r} data")
        await self._capabilities()
        budget = self._http.max_request_bytes - HEADER_ALLOWANCE
        payload, trimmed = trim_event_data(kind, {} if data is None else data, budget)
        if trimmed:
            log.warning(
                "event %r data trimmed to fit the tracker's %d-byte request budget",
                kind,
                budget,
                extra={"action": "event_trimmed", "task_id": lease.task_id, "run_id": lease.run_id},
            )
        doc = await self._json(
            "POST",
            f"/runs/{seg(lease.run_id)}/events",
            body={"kind": kind, "data": payload},
            auth="lease",
            lease_token=lease.lease_token.get_secret_value(),
            lease_route=True,
            idempotency_key=self._key(idempotency_key),
        )
        event_id = doc.get("id") if isinstance(doc, dict) else None
        if not isinstance(event_id, int):
            raise TrackerUnavailable(
                "POST /runs/{id}/events: answer without an integer id", code="invalid_response"
            )
        return event_id

    async def list_events(
        self, run_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Event]:
        """``GET /runs/{id}/events`` with the admin token; cursor rebuilt from the last item."""
        self._check_limit(limit, "list_events")
        query = encode_query({"limit": limit, "cursor": cursor})
        doc = await self._json("GET", f"/runs/{seg(run_id)}/events?{query}", auth="any_bearer")
        page = self._parse(_EVENT_PAGE, doc, "GET /runs/{id}/events")
        return Page[Event](items=page.items, next_cursor=item_cursor(page, "event"))

    async def transition(
        self,
        lease: LeaseRef,
        trigger: str,
        *,
        expected_stage: str | None = None,
        expected_task_version: int | None = None,
        instructions: str | None = None,
        usage: Any = None,
        idempotency_key: str | None = None,
    ) -> TransitionResult:
        """``POST /runs/{run_id}/transition``; an invalid trigger lists the allowed ones."""
        check_json(usage, "transition usage")
        body: dict[str, Any] = {"trigger": trigger}
        for name, value in (
            ("expected_stage", expected_stage),
            ("expected_task_version", expected_task_version),
            ("instructions", instructions),
            ("usage", usage),
        ):
            if value is not None:
                body[name] = value
        try:
            doc = await self._json(
                "POST",
                f"/runs/{seg(lease.run_id)}/transition",
                body=body,
                auth="lease",
                lease_token=lease.lease_token.get_secret_value(),
                lease_route=True,
                idempotency_key=self._key(idempotency_key),
            )
        except InvalidTransition as exc:
            allowed = exc.allowed
            if not allowed:
                try:
                    detail = await self.get_task(lease.task_id)
                    allowed = [t.trigger for t in detail.available_transitions]
                except TrackerError:
                    allowed = []
            raise InvalidTransition(
                f"trigger {trigger!r} is not allowed from the task's stage; allowed: "
                f"{', '.join(allowed) or '(none known)'} (the lease is still held)",
                code=exc.code,
                allowed=allowed,
            ) from exc
        return self._parse(TransitionResult, doc, "POST /runs/{id}/transition")

    async def fail(
        self,
        lease: LeaseRef,
        error: str,
        *,
        usage: Any = None,
        retryable: bool = True,
        idempotency_key: str | None = None,
    ) -> FailResult:
        """``POST /runs/{run_id}/fail``; what happened next is read back from the task.

        NullTickets answers ``{"status":"failed"}`` whether a retry was scheduled or the task was
        dead-lettered; the client then reads the task (``dead_letter_reason``,
        ``next_eligible_at_ms``) to fill the result. If that read fails, those fields stay None.
        ``retryable=False`` dead-letters at once on the served tracker; NullTickets ignores it.
        """
        check_json(usage, "fail usage")
        body: dict[str, Any] = {"error": error}
        if usage is not None:
            body["usage"] = usage
        if not retryable:
            # Honoured by the served tracker; a NullTickets server ignores unknown fields.
            body["retryable"] = False
        doc = await self._json(
            "POST",
            f"/runs/{seg(lease.run_id)}/fail",
            body=body,
            auth="lease",
            lease_token=lease.lease_token.get_secret_value(),
            lease_route=True,
            idempotency_key=self._key(idempotency_key),
        )
        result = self._parse(FailResult, doc, "POST /runs/{id}/fail")
        if result.dead_lettered is not None:
            return result
        try:
            task = await self.get_task(lease.task_id)
        except TrackerError as exc:
            log.warning(
                "fail recorded, but the task could not be read back: %s",
                exc,
                extra={"action": "fail_readback", "task_id": lease.task_id},
            )
            return result
        dead = task.dead_letter_reason is not None
        return FailResult(
            status=result.status,
            retry_scheduled=not dead,
            dead_lettered=dead,
            next_eligible_at_ms=None if dead else task.next_eligible_at_ms,
            dead_letter_reason=task.dead_letter_reason,
        )

    async def release(
        self,
        lease: LeaseRef,
        reason: str = "worker_shutdown",
        *,
        idempotency_key: str | None = None,
    ) -> ReleaseResult:
        """``POST /runs/{run_id}/release`` (served tracker): the task is claimable again at once
        and the run costs no attempt.

        A plain NullTickets server has no such route, and its ``fail`` always counts an attempt
        (the task's last one dead-letters it for good: NullTickets cannot requeue). So nothing is
        sent there: the lease is left to expire (at most 300 s after the last heartbeat) and the
        stale run does not count against ``max_attempts``. ``released=False`` says so.
        """
        if not await self._has("release"):
            log.info(
                "tracker has no release: the lease is left to expire (no attempt counted)",
                extra={"action": "release_by_expiry", "task_id": lease.task_id},
            )
            return ReleaseResult(released=False, reason=reason)
        doc = await self._json(
            "POST",
            f"/runs/{seg(lease.run_id)}/release",
            body={"reason": reason},
            auth="lease",
            lease_token=lease.lease_token.get_secret_value(),
            lease_route=True,
            idempotency_key=self._key(idempotency_key),
        )
        return self._parse(ReleaseResult, doc, "POST /runs/{id}/release")
