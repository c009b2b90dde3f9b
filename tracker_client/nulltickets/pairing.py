"""The claim riding with the final reports: a ``finish_many`` and the ``claim_many`` that
follows it, sent as one request (extension ``finish_claim``, docs/reference/http-api.md).

A worker's runs of one claim end together; their reports go as one ``finish_many``, and the
slots they freed claim again a fraction of a millisecond later. Two requests, two answers: on
the served rail each costs the worker and the server more CPU than the write itself. Here a
``finish_many`` waits a few scheduling passes (:data:`PAIR_PASSES`, no timer) for a
``claim_many`` to take it along; a claim that finds one waiting sends both in one request, the
items first (the server writes them, then the claim, in one transaction where it shares one),
and each caller gets its own answer, as the two plain calls would have given it.

Nothing of either call's guarantees changes:

* each item keeps its own lease token and key, the claim its own key (a claim without one
  never rides: its lost answer would strand its leases until they expire), so a lost answer is
  recovered as before, each caller retrying its own call under its own key;
* the request is sent by the claim's task, whose cancellation a worker shields (a claim at the
  tracker completes); the reports' caller only waits for the answer. A request whose answer
  is lost fails both calls with the same retryable error;
* a ``finish_many`` that no claim takes along within the passes goes alone.

May touch: the wire (one request), no configuration.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from tracker_client.contract.batch_bodies import FinishClaimBody, FinishManyResult
from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome
from tracker_client.contract.wire_errors import error_for
from tracker_client.errors import TrackerError, TrackerUnavailable
from tracker_client.models import Lease
from tracker_client.nulltickets.batching import items_json, outcomes_of, send_items
from tracker_client.nulltickets.codec import dumps
from tracker_client.nulltickets.wire import Wire

__all__ = ["PAIR_PASSES", "Pairing"]

#: How many scheduling passes a ``finish_many`` waits for a claim to take it along. A
#: worker's claim follows its reports by 1-3 passes (its slots are handed back first).
PAIR_PASSES = 4
#: What the riding claim's error is read as: an error answer of ``claim_many``'s own route.
_CLAIM_ROUTE = "POST /leases/claim-many"

#: Sends a ``claim_many`` on its own (the plain call).
SendClaim = Callable[[], Awaitable[list[Lease]]]


class _Waiting:
    """A ``finish_many`` waiting for a claim: its items' body and count, and its outcome once
    answered."""

    __slots__ = ("done", "error", "n", "outcomes", "raw", "taken")

    def __init__(self, raw: bytes, n: int) -> None:
        self.raw = raw
        self.n = n
        self.taken = False
        self.done = anyio.Event()
        self.outcomes: list[FinishManyOutcome] = []
        self.error: TrackerError | None = None


class Pairing:
    """Pairs a ``finish_many`` with the ``claim_many`` that follows it (module docstring)."""

    def __init__(self, wire: Wire, *, passes: int = PAIR_PASSES) -> None:
        self._wire = wire
        self._passes = passes
        self._waiting: _Waiting | None = None
        #: Requests that carried both, and ``finish_many`` calls no claim took along (benches
        #: and tests read them).
        self.paired = 0
        self.alone = 0

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """``items``' outcomes, sent with the next claim when one comes within the passes.
        Items that are refused before sending (the batch's limits, not JSON) are refused here,
        in this call: they never ride, so the claim never fails for them."""
        raw = items_json(items)
        if self._waiting is not None or self._passes <= 0:
            self.alone += 1
            return await send_items(self._wire, raw, len(items))
        waiting = self._waiting = _Waiting(raw, len(items))
        try:
            for _ in range(self._passes):
                await anyio.lowlevel.checkpoint()
                if waiting.taken:
                    break
        finally:
            if self._waiting is waiting:
                self._waiting = None
        if not waiting.taken:
            self.alone += 1
            return await send_items(self._wire, raw, len(items))
        await waiting.done.wait()
        if waiting.error is not None:
            raise waiting.error
        return waiting.outcomes

    async def claim_many(
        self, claim: Mapping[str, Any], idempotency_key: str | None, alone: SendClaim
    ) -> list[Lease]:
        """The leases of ``claim`` (``claim_many``'s body), carrying the ``finish_many``
        waiting, if any (else ``alone``: the plain call)."""
        waiting = self._waiting
        if waiting is None or idempotency_key is None:
            return await alone()
        # The claim's own checks first: a claim refused before sending takes no report along.
        riding = FinishClaimBody.model_validate(dict(claim)).model_dump(exclude_unset=True)
        riding["idempotency_key"] = idempotency_key
        self._waiting = None
        waiting.taken = True
        self.paired += 1
        try:
            answer = await self.send_riding(waiting.raw, riding)
        except BaseException as exc:
            waiting.error = (
                exc
                if isinstance(exc, TrackerError)
                else TrackerUnavailable(
                    "finish_many: the answer of the request it rode in was not read (it may "
                    "have been written; a retry with the same key is answered from the rail's "
                    "record)",
                    code="batch_interrupted",
                )
            )
            waiting.done.set()
            raise
        try:
            waiting.outcomes = outcomes_of(answer, waiting.n)
        except TrackerError as exc:
            waiting.error = exc
        waiting.done.set()
        # The reports' caller hears back first, so the reported runs count as finished before
        # the claimed ones start (as two requests, answered in that order, would have it).
        for _ in range(2):
            await anyio.lowlevel.cancel_shielded_checkpoint()
        entry = answer.claim
        if entry is None:
            raise TrackerUnavailable(
                "POST /runs/finish-many: the answer has no claim entry (the server does not "
                "read the claim: is it older than its health said?)",
                code="invalid_response",
            )
        if entry.status == 200 and entry.leases is not None:
            return entry.leases
        error = entry.error or {"code": "invalid_response", "message": "no error object"}
        raise error_for(entry.status, _error_json(error), {}, _CLAIM_ROUTE, lease_route=False)

    async def send_riding(self, items: bytes, riding: Mapping[str, Any]) -> FinishManyResult:
        """One ``finish_many`` request: ``items`` (a body :func:`~.batching.items_json` made)
        with ``riding`` (a ``claim_many`` body with its idempotency key) as its claim."""
        # The items' body, already checked and encoded, with the claim (plain JSON: its model's
        # dump) as one more member: ``{"items":[...]}`` becomes ``{"items":[...],"claim":{...}}``.
        raw = b"".join((items[:-1], b',"claim":', dumps(riding), b"}"))
        return await self._wire.call("finish_many", raw=raw, into=FinishManyResult)


def _error_json(error: Mapping[str, Any]) -> bytes:
    return json.dumps({"error": dict(error)}).encode()
