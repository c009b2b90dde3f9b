"""The parked claim over HTTP (extension ``parked_claim``): the long read, and the cancel.

``POST /leases/claim-parked`` waits at the server up to ``wait_ms`` for work, so its read
timeout covers the wait (as the long polls' do: :mod:`.waiting`). Its key is required, and the
caller's retry under the same key answers the same leases. When the call ends without its
answer (the caller cancelled it, a stopping worker; or the connection dropped, a timeout) the
client sends ``POST /leases/claim-parked/cancel`` under the same key, shielded and bounded:
the server stops the claim and releases whatever it leased (no attempt counted), so no lease is
left to its TTL because its answer was not taken. Then the call's own outcome stands (the
cancellation, or the error, which the caller may retry under the key: it then answers ``[]``
or, if the cancel did not reach the server either, the same leases).

May touch: the wire only. On a plain server both are ``Unsupported`` before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from tracker_client.contract.parked_models import ParkedCancelled, check_parked
from tracker_client.errors import TrackerError, TrackerUnavailable
from tracker_client.models import Lease
from tracker_client.nulltickets.wire import Wire, log

__all__ = ["cancel_parked_claim", "parked_claim"]


async def parked_claim(
    wire: Wire,
    body: dict[str, Any],
    wait_ms: int,
    concurrency: Mapping[str, object] | None,
    idempotency_key: str | None,
) -> list[Lease]:
    """``parked_claim`` (``body``: ``claim_many``'s fields); see the module docstring."""
    key = check_parked(idempotency_key, wait_ms)
    body = {**body, "wait_ms": wait_ms}
    if concurrency is not None:
        body["concurrency"] = dict(concurrency)
    read_timeout_s = wait_ms / 1000 + (wire.http.timeout.read or 10.0) + 1.0
    try:
        return await wire.call(
            "parked_claim",
            body=body,
            idempotency_key=key,
            read_timeout_s=read_timeout_s,
            retry=False,
            into=list[Lease],
        )
    except TrackerUnavailable:
        await _cancel_quietly(wire, key)
        raise
    except anyio.get_cancelled_exc_class():
        await _cancel_quietly(wire, key)
        raise


async def cancel_parked_claim(wire: Wire, idempotency_key: str | None) -> ParkedCancelled:
    """``POST /leases/claim-parked/cancel`` under the parked claim's key."""
    key = check_parked(idempotency_key, 0)
    return await wire.call("cancel_parked_claim", idempotency_key=key, into=ParkedCancelled)


async def _cancel_quietly(wire: Wire, key: str) -> None:
    """The cancel of a call that ended without its answer: shielded (a cancelled caller still
    sends it), bounded by the client's read timeout, and never raising (the call's own outcome
    is what the caller gets)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(wire.http.timeout.read or 10.0):
        try:
            answer = await cancel_parked_claim(wire, key)
        except TrackerError as exc:
            log.warning(
                "cancelling a parked claim failed: %s (a retry under its key answers the same "
                "leases; else they wait out their TTL)",
                exc,
                extra={"action": "parked_cancel_failed"},
            )
            return
        if answer.released:
            log.info(
                "parked claim cancelled: %d lease(s) given back",
                answer.released,
                extra={"action": "parked_claim_released"},
            )
