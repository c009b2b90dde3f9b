"""Route handlers of the served tracker's batching extensions: ``claim_many``, ``finish_many``
(and the claim riding in it, extension ``finish_claim``).

A row alone cannot say them: ``claim_many`` answers the leases' tokens in clear (as ``claim``
answers its one); ``finish_many`` reads a lease token per item (the request itself carries the
api token, as ``claim`` does) and answers each item's outcome as the status and error object
``finish`` would have answered it; its ``claim`` (extension ``finish_claim``) is claimed after
the items, in the same write where the tracker shares one (the embedded rail's parked
``finish_many`` takes the claim that follows it along), and answered under ``claim`` as
``claim_many`` would have answered it. Named after their operations in
:data:`tracker_client.contract.table.OPERATIONS`, as in :mod:`tracker_client.serve.routes`.

It may touch the request and the tracker of the request (through ``call`` by operation name);
never the storage directly.
"""

from __future__ import annotations

import json

import anyio
import anyio.lowlevel
from pydantic import SecretStr
from starlette.requests import Request
from starlette.responses import Response

from tracker_client.capabilities import LeaseHandle
from tracker_client.contract.batch_bodies import ClaimManyBody, FinishClaimBody, FinishManyBody
from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome, FinishResult
from tracker_client.contract.wire_errors import response_for
from tracker_client.errors import TrackerCorrupt, TrackerError
from tracker_client.models import Lease
from tracker_client.protocol import Tracker
from tracker_client.serve.helpers import dump, idem_key, lease_json, tracker_of
from tracker_client.serve.http import Handlers, json_response, raw_json_response, read_model

__all__ = ["HANDLERS"]

#: This module's handlers by operation name.
HANDLERS = Handlers()


@HANDLERS
async def claim_many(request: Request) -> Response:
    """``POST /leases/claim-many``: up to ``n`` leases of the role in one write (a JSON array,
    empty when there is no work; each lease with its token, as ``claim`` answers it)."""
    body = await read_model(request, ClaimManyBody)
    leases = await _claim_many(tracker_of(request), body, idem_key(request))
    docs = []
    for lease in leases:
        doc = dump(lease)
        doc["lease_token"] = lease.lease_token.get_secret_value()
        docs.append(doc)
    return json_response(docs)


async def _claim_many(tracker: Tracker, body: ClaimManyBody, key: str | None) -> list[Lease]:
    """The tracker's ``claim_many`` of a claim body (the route's own, or the claim riding in
    a ``finish_many``) under the idempotency key ``key``."""
    leases: list[Lease] = await tracker.call(
        "claim_many",
        agent_id=body.agent_id,
        agent_role=body.agent_role,
        lease_ttl_ms=body.lease_ttl_ms,
        n=body.n,
        concurrency=body.concurrency,
        idempotency_key=key,
    )
    return leases


def _entry(outcome: FinishManyOutcome) -> bytes:
    """One item's answer entry as JSON text: ``{"status": 200, "result"}`` (the result's own
    ``model_dump_json``, one pass) or its error as ``finish``'s route would answer it."""
    if isinstance(outcome, TrackerError):
        if isinstance(outcome, TrackerCorrupt):
            raise outcome  # the storage itself: the whole request fails, as any request would
        status, body, _headers = response_for(outcome)
        return json.dumps({"status": status, "error": body["error"]}).encode()
    return b'{"status":200,"result":' + outcome.model_dump_json().encode() + b"}"


def _results(outcomes: list[FinishManyOutcome]) -> bytes:
    """The items' entries, in order. A batch's moves that the rail planned once answer one
    (frozen) transition result (:func:`tracker_client.rules.finish_many.plain_batch`): an
    entry that is only that result (no event ids, no fail) is the same text for each, encoded
    once per result (~17.7k instructions an item otherwise, ~7 % of the event loop's)."""
    shared: dict[int, bytes] = {}
    parts: list[bytes] = []
    for outcome in outcomes:
        if (
            isinstance(outcome, FinishResult)
            and (transition := outcome.transition) is not None  # a model's field: read once
            and not outcome.event_ids
            and outcome.fail is None
        ):
            text = shared.get(id(transition))
            if text is None:
                text = shared[id(transition)] = _entry(outcome)
        else:
            text = _entry(outcome)
        parts.append(text)
    return b'{"results":[' + b",".join(parts) + b"]"


@HANDLERS
async def finish_many(request: Request) -> Response:
    """``POST /runs/finish-many``: each item's ``finish`` under its own lease token and key, in
    one write; ``{"results": [...]}``, one entry per item in the items' order."""
    body = await read_model(request, FinishManyBody)
    # Positional, and no generator for a report without events (most): ~4k instructions an
    # item of the ~37k it took to build. (The body's transition read once: a model's field
    # is read through its __getattr__ hook.)
    items = [
        FinishItem(
            LeaseHandle("", i.run_id, SecretStr(i.lease_token)),
            tuple([e.model_dump() for e in i.events]) if i.events else (),
            None if (moved := i.transition) is None else moved.model_dump(),
            None if i.fail is None else i.fail.model_dump(),
            i.idempotency_key,
        )
        for i in body.items
    ]
    tracker = tracker_of(request)
    if body.claim is None:
        outcomes = await tracker.call("finish_many", items=items)
        return raw_json_response(_results(outcomes) + b"}")
    outcomes, claimed = await _finish_and_claim(tracker, items, body.claim)
    return raw_json_response(_results(outcomes) + b',"claim":' + _claim_entry(claimed) + b"}")


async def _finish_and_claim(
    tracker: Tracker, items: list[FinishItem], claim: FinishClaimBody
) -> tuple[list[FinishManyOutcome], list[Lease] | TrackerError]:
    """The items' outcomes, then the claim's leases or the error refusing it.

    The claim starts right after the items' write is queued: a tracker whose ``finish_many``
    waits for the next write (the embedded rail) writes both in one transaction, the items
    first, so the slots they free count for the claim. Only the claim's own refusal is
    answered under ``claim``; a failure of the whole write (the storage) fails the request.
    """
    outcomes: list[FinishManyOutcome] = []
    claimed: list[Lease] | TrackerError = []

    async def finish() -> None:
        nonlocal outcomes
        outcomes = await tracker.call("finish_many", items=items)

    async with anyio.create_task_group() as tg:
        tg.start_soon(finish)
        await anyio.lowlevel.checkpoint()  # the items' write is queued first
        try:
            claimed = await _claim_many(tracker, claim, claim.idempotency_key)
        except TrackerCorrupt:
            raise
        except TrackerError as exc:
            claimed = exc
    return outcomes, claimed


def _claim_entry(claimed: list[Lease] | TrackerError) -> bytes:
    """The riding claim's answer: ``{"status": 200, "leases": [...]}`` (tokens in clear, as
    ``claim_many`` answers them) or its error as ``claim_many``'s route would answer it."""
    if isinstance(claimed, TrackerError):
        status, body, _headers = response_for(claimed)
        return json.dumps({"status": status, "error": body["error"]}).encode()
    return b'{"status":200,"leases":[' + b",".join(map(lease_json, claimed)) + b"]}"
