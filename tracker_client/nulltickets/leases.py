"""The lease operations' quirks on a NullTickets server: claim, heartbeat, events, finish.

Functions of a :class:`~tracker_client.nulltickets.wire.Wire` that
:class:`~tracker_client.nulltickets.client.RemoteTracker` delegates to; the wire derives route and
credentials from the contract table (the lease token *replaces* the admin token on heartbeat,
events, transition, fail and release; 404/410/401 there mean the lease is lost). What is
particular to each, and handled here:

* ``claim``: a TTL outside 1..86,400,000 ms is refused (the server would hand out a lease that is
  already expired); on a NullTickets server a TTL over 300 s is clamped, since its first
  heartbeat cuts the lease to 300 s anyway; a fresh idempotency key per call (a cached 204 is
  never replayed) that its retries reuse (a lost answer comes back as the same lease);
* ``heartbeat``: no idempotency key; NullTickets resets every lease to now + 300 s whatever TTL
  was asked, which is warned about once;
* ``add_event``: data over the size budget is trimmed with a visible marker (:mod:`.limits`);
* ``transition``: NullTickets' ``invalid_transition`` does not list the allowed triggers: they
  are read from the task;
* ``fail``: NullTickets answers the same whether a retry was scheduled or the task
  dead-lettered: what happened is read back from the task;
* ``release``: a plain server has no such route (nothing is sent: the lease is left to expire);
* ``withdraw`` (a lease claimed ahead and never handed out): released instead where the server
  does not list the ``withdraw`` extension.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tracker_client.agent_models import UNSET
from tracker_client.capabilities import LeaseRef
from tracker_client.contract.table import MAX_LEASE_TTL_MS
from tracker_client.contract.wire_models import EventIdAnswer, ExpiryAnswer, WithdrawnAnswer
from tracker_client.errors import InvalidTransition, TrackerError, ValidationFailed
from tracker_client.models import FailResult, Lease, ReleaseResult, TransitionResult
from tracker_client.nulltickets.codec import check_json
from tracker_client.nulltickets.discovery import NULLTICKETS_LEASE_TTL_MS
from tracker_client.nulltickets.limits import HEADER_ALLOWANCE, trim_event_data
from tracker_client.nulltickets.reads import get_task
from tracker_client.nulltickets.wire import Wire, log

__all__ = ["add_event", "claim", "fail", "heartbeat", "release", "transition"]


def _given(**values: Any) -> dict[str, Any]:
    """The body fields that were given (None values left out: the server's defaults apply)."""
    return {name: value for name, value in values.items() if value is not None}


async def claim(
    wire: Wire,
    agent_id: str,
    role: str,
    lease_ttl_ms: int,
    per_state: Mapping[str, int] | None,
    idempotency_key: str | None,
) -> Lease | None:
    """``claim`` with the TTL checked and, on NullTickets, clamped to 300 s; None: no work."""
    if not 1 <= lease_ttl_ms <= MAX_LEASE_TTL_MS:
        raise ValidationFailed(
            f"claim: lease_ttl_ms must be 1..{MAX_LEASE_TTL_MS}, got {lease_ttl_ms}",
            code="invalid_lease_ttl",
        )
    await wire.discovery.get()
    cap = wire.discovery.max_lease_ttl_ms
    if cap is not None and lease_ttl_ms > cap:
        wire.warn_once(
            "lease_ttl_clamped",
            f"lease_ttl_ms {lease_ttl_ms} clamped to {cap}: the NullTickets server resets "
            "every lease to 300 s on heartbeat",
        )
        lease_ttl_ms = cap
    body: dict[str, Any] = {"agent_id": agent_id, "agent_role": role, "lease_ttl_ms": lease_ttl_ms}
    if per_state:
        body["concurrency"] = {"per_state": dict(per_state)}
    return await wire.call_or_none("claim", body=body, idempotency_key=idempotency_key, into=Lease)


async def heartbeat(
    wire: Wire, lease: LeaseRef, lease_ttl_ms: int | None, checkpoint: Any = UNSET
) -> int:
    """``heartbeat``: the server's new expiry; warns once when NullTickets cut the TTL. A
    ``checkpoint`` needs the ``checkpoints`` extension (``Unsupported`` before anything is
    sent on a server without it: a plain server would extend the lease and drop it)."""
    # NullTickets ignores the body; the served tracker uses the TTL, and the run id to tell
    # why a lease is gone (revoked by a cancel, expired) when the lease row no longer exists.
    body = _given(run_id=lease.run_id, lease_ttl_ms=lease_ttl_ms)
    if checkpoint is not UNSET:
        check_json(checkpoint, "checkpoint")
        await wire.discovery.require("checkpoints", "heartbeat with a checkpoint")
        body["checkpoint"] = checkpoint
    answer = await wire.call("heartbeat", lease.lease_id, body=body, lease=lease, into=ExpiryAnswer)
    expires = answer.expires_at_ms
    wanted = lease_ttl_ms or (
        lease.expires_at_ms - lease.run.started_at_ms if isinstance(lease, Lease) else 0
    )
    if wanted > NULLTICKETS_LEASE_TTL_MS and expires < int(time.time() * 1000) + wanted - 60_000:
        wire.warn_once(
            "lease_ttl_reset",
            "the tracker reset the lease to about 300 s on heartbeat (NullTickets does this "
            "whatever TTL was asked): heartbeat at least every 100 s",
            task_id=lease.task_id,
            run_id=lease.run_id,
        )
    return expires


async def add_event(
    wire: Wire, lease: LeaseRef, kind: str, data: Any, idempotency_key: str | None
) -> int:
    """``add_event``, its data trimmed (with a marker) to fit the request budget."""
    check_json(data, f"event {kind!r} data")
    await wire.discovery.get()
    budget = wire.http.max_request_bytes - HEADER_ALLOWANCE
    payload, trimmed = trim_event_data(kind, {} if data is None else data, budget)
    if trimmed:
        log.warning(
            "event %r data trimmed to fit the tracker's %d-byte request budget",
            kind,
            budget,
            extra={"action": "event_trimmed", "task_id": lease.task_id, "run_id": lease.run_id},
        )
    answer = await wire.call(
        "add_event",
        lease.run_id,
        body={"kind": kind, "data": payload},
        lease=lease,
        idempotency_key=idempotency_key,
        into=EventIdAnswer,
    )
    return answer.id


async def transition(
    wire: Wire, lease: LeaseRef, trigger: str, fields: Mapping[str, Any], key: str | None
) -> TransitionResult:
    """``transition``; an invalid trigger is re-raised listing the allowed ones (read from the
    task when the server did not say)."""
    check_json(fields.get("usage"), "transition usage")
    body = {"trigger": trigger, **_given(**fields)}
    if body.get("wait_for") == []:
        del body["wait_for"]
    elif "wait_for" in body:  # a plain server would move the task and drop the edges
        await wire.discovery.require("fan_in", "transition with wait_for")
    try:
        return await wire.call(
            "transition",
            lease.run_id,
            body=body,
            lease=lease,
            idempotency_key=key,
            into=TransitionResult,
        )
    except InvalidTransition as exc:
        allowed = exc.allowed
        if not allowed:
            try:
                detail = await get_task(wire, lease.task_id)
                allowed = [t.trigger for t in detail.available_transitions]
            except TrackerError:
                allowed = []
        raise InvalidTransition(
            f"trigger {trigger!r} is not allowed from the task's stage; allowed: "
            f"{', '.join(allowed) or '(none known)'} (the lease is still held)",
            code=exc.code,
            allowed=allowed,
        ) from exc


async def fail(
    wire: Wire,
    lease: LeaseRef,
    error: str,
    usage: Any,
    retryable: bool,
    idempotency_key: str | None,
) -> FailResult:
    """``fail``; when the answer does not say what happened next, it is read from the task
    (``dead_letter_reason``, ``next_eligible_at_ms``; if that read fails they stay None)."""
    check_json(usage, "fail usage")
    # ``retryable`` is honoured by the served tracker; a NullTickets server ignores the field.
    body = _given(error=error, usage=usage, retryable=False if not retryable else None)
    result = await wire.call(
        "fail",
        lease.run_id,
        body=body,
        lease=lease,
        idempotency_key=idempotency_key,
        into=FailResult,
    )
    if result.dead_lettered is not None:
        return result
    try:
        task = await get_task(wire, lease.task_id)
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
    wire: Wire, lease: LeaseRef, reason: str, idempotency_key: str | None
) -> ReleaseResult:
    """``release`` on the served tracker; on a plain server nothing is sent
    (``released=False``): the lease is left to expire, costing no attempt."""
    if not await wire.discovery.has("release"):
        log.info(
            "tracker has no release: the lease is left to expire (no attempt counted)",
            extra={"action": "release_by_expiry", "task_id": lease.task_id},
        )
        return ReleaseResult(released=False, reason=reason)
    return await wire.call(
        "release",
        lease.run_id,
        body={"reason": reason},
        lease=lease,
        idempotency_key=idempotency_key,
        into=ReleaseResult,
    )


async def withdraw(wire: Wire, lease: LeaseRef, reason: str) -> bool:
    """Give back a lease claimed ahead that no claim took: withdrawn where the server lists
    ``withdraw`` (no run left, its attempt count unchanged: the task's next executor never
    sees attempt 2 of a task whose attempt 1 never ran), else released with ``reason`` (the
    run ends ``released``, nothing counted). Whether it was given back."""
    if await wire.discovery.has("withdraw"):
        answer = await wire.call("withdraw", lease.run_id, lease=lease, into=WithdrawnAnswer)
        return answer.withdrawn
    return (await release(wire, lease, reason, None)).released
