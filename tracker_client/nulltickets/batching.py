"""The remote client's batching calls: ``finish`` (a lease operation, so a typed call).

``claim_many`` needs none: it is an admin operation, and ``RemoteTracker.call("claim_many",
...)`` sends it from its contract row. ``finish`` carries the lease token, and lease operations
are not sent through ``call``: :func:`finish` is what ``RemoteTracker.finish`` sends. Both need
the extension listed in ``/health`` (``Unsupported`` before anything is sent, on a plain
NullTickets server). May touch: the wire (one request).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from tracker_client.capabilities import LeaseRef
from tracker_client.errors import ValidationFailed
from tracker_client.nulltickets.batch_models import MAX_FINISH_EVENTS, FinishResult
from tracker_client.nulltickets.transport import check_json
from tracker_client.nulltickets.wire import Wire

__all__ = ["finish"]


def _plain(value: BaseModel | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return value.model_dump() if isinstance(value, BaseModel) else dict(value)


async def finish(
    wire: Wire,
    lease: LeaseRef,
    events: Sequence[BaseModel | Mapping[str, Any]],
    transition: BaseModel | Mapping[str, Any] | None,
    fail: BaseModel | Mapping[str, Any] | None,
    idempotency_key: str | None,
) -> FinishResult:
    """``POST /runs/{run_id}/finish``: ``events``, then ``transition`` or ``fail``, in one
    request (the served tracker writes them in one transaction)."""
    if (transition is None) == (fail is None):
        raise ValidationFailed(
            "finish: give exactly one of transition or fail", code="invalid_finish"
        )
    if len(events) > MAX_FINISH_EVENTS:
        raise ValidationFailed(
            f"finish: events: at most {MAX_FINISH_EVENTS}, got {len(events)}",
            code="too_many_events",
        )
    body: dict[str, Any] = {"events": [_plain(e) for e in events]}
    if transition is not None:
        body["transition"] = _plain(transition)
    if fail is not None:
        body["fail"] = _plain(fail)
    check_json(body, "finish")
    return await wire.call(
        "finish",
        lease.run_id,
        body=body,
        lease=lease,
        idempotency_key=idempotency_key,
        into=FinishResult,
    )
