"""The remote client's batching calls: ``finish`` and ``finish_many`` (typed calls, the methods
of :class:`BatchCalls`, a base of :class:`~tracker_client.nulltickets.client.RemoteTracker`).

``claim_many`` needs none: it is an admin operation, and ``RemoteTracker.claim_many`` sends it
from its contract row (as ``call("claim_many", ...)`` does). ``finish`` carries the lease
token, and lease operations are not sent through ``call``: :func:`finish` is what
``RemoteTracker.finish`` sends.
``finish_many`` carries a lease token per item and answers per item: :func:`finish_many` reads
each entry back as ``finish``'s answer or the exception its error would be on ``finish``'s
route. All need the extension listed in ``/health`` (``Unsupported`` before anything is sent,
on a plain NullTickets server). May touch: the wire (one request).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from tracker_client.capabilities import LeaseRef
from tracker_client.contract.batch_bodies import FinishManyEntry, FinishManyResult
from tracker_client.contract.batch_models import (
    MAX_FINISH_EVENTS,
    FinishItem,
    FinishManyOutcome,
    FinishResult,
    check_items,
)
from tracker_client.contract.wire_errors import error_for
from tracker_client.errors import TrackerUnavailable, ValidationFailed
from tracker_client.nulltickets.codec import encode_json
from tracker_client.nulltickets.wire import Wire

__all__ = [
    "BatchCalls",
    "finish",
    "finish_many",
    "item_body",
    "items_json",
    "outcomes_of",
    "send_items",
]

#: What an item's error is read as: an error answer of ``finish``'s own route.
_ITEM_ROUTE = "POST /runs/{run_id}/finish"


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
    return await wire.call(
        "finish",
        lease.run_id,
        raw=encode_json(body, "finish"),
        lease=lease,
        idempotency_key=idempotency_key,
        into=FinishResult,
    )


def item_body(item: FinishItem) -> dict[str, Any]:
    """An item as the wire carries it (its own checks are the server's, answered per item)."""
    body: dict[str, Any] = {
        "run_id": item.lease.run_id,
        "lease_token": item.lease.lease_token.get_secret_value(),
        "events": [dict(e) for e in item.events],
    }
    if item.idempotency_key is not None:
        body["idempotency_key"] = item.idempotency_key
    if item.transition is not None:
        body["transition"] = dict(item.transition)
    if item.fail is not None:
        body["fail"] = dict(item.fail)
    return body


def _outcome(entry: FinishManyEntry) -> FinishManyOutcome:
    if entry.status == 200 and entry.result is not None:
        return entry.result
    if entry.error is None:
        return TrackerUnavailable(
            f"POST /runs/finish-many: an entry with status {entry.status} and no error",
            code="invalid_response",
        )
    raw = json.dumps({"error": entry.error}).encode()
    return error_for(entry.status, raw, {}, _ITEM_ROUTE, lease_route=True)


async def finish_many(wire: Wire, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
    """``POST /runs/finish-many``: each item's ``finish`` in one request; per item, its result
    or the exception its error entry is (a lost lease, a stale version: as on ``finish``)."""
    return await send_items(wire, items_json(items), len(items))


def items_json(items: Sequence[FinishItem]) -> bytes:
    """The body of a ``finish_many`` of ``items``, checked and encoded once: the batch's limits
    and plain JSON (``ValidationFailed`` naming ``finish_many`` otherwise, before anything is
    sent). A JSON object: :mod:`~.pairing` appends the riding claim to it."""
    check_items(items)
    return encode_json({"items": [item_body(item) for item in items]}, "finish_many")


async def send_items(wire: Wire, raw: bytes, n: int) -> list[FinishManyOutcome]:
    """Send the body :func:`items_json` made of ``n`` items; per item, its outcome."""
    answer = await wire.call("finish_many", raw=raw, into=FinishManyResult)
    return outcomes_of(answer, n)


def outcomes_of(answer: FinishManyResult, n: int) -> list[FinishManyOutcome]:
    """Per item of the ``n`` sent, its result or the exception its error entry is;
    ``TrackerUnavailable`` when the answer has another count of entries."""
    if len(answer.results) != n:
        raise TrackerUnavailable(
            f"POST /runs/finish-many: {len(answer.results)} entries for {n} items",
            code="invalid_response",
        )
    return [_outcome(entry) for entry in answer.results]


class BatchCalls:
    """The batching calls of the remote client (over its ``_wire``): a base of
    :class:`~tracker_client.nulltickets.client.RemoteTracker`."""

    _wire: Wire

    async def finish(
        self,
        lease: LeaseRef,
        *,
        events: Sequence[BaseModel | Mapping[str, Any]] = (),
        transition: BaseModel | Mapping[str, Any] | None = None,
        fail: BaseModel | Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> FinishResult:
        """``POST /runs/{run_id}/finish`` (extension ``finish``): the run's last events and its
        transition or fail in one request, written all or nothing."""
        return await finish(self._wire, lease, events, transition, fail, idempotency_key)

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """``POST /runs/finish-many`` (extension ``finish_many``): the final reports of many
        runs in one request; per item, its ``finish`` answer or the error refusing it."""
        return await finish_many(self._wire, items)
