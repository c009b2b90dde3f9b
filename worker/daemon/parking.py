"""The idle worker's parked claim: one claim that waits at the tracker until work comes.

An idle worker otherwise waits for the tracker's wake-up (:class:`~worker.daemon.watch.
TrackerWatch`) and then claims: over HTTP, two answers and a request between a submit and the
executor's start. Where the rail declares the extension ``parked_claim`` (``tracker serve``),
the claim loop's probe after an empty round is instead a parked claim that waits up to the idle
delay and leases the work as it comes (docs/operate/rails.md).

A stop must not strand a lease: the parked claim's wait runs in a cancel scope that the
worker's first stop cancels (:meth:`~worker.daemon.running.OpenClaim.parked`, inside the
claim's shield), and cancelling it cancels it at the tracker under its key (the client sends
``cancel_parked_claim``, and the tracker releases whatever it leased: no attempt counted).
Leases answered before the stop are the claim loop's, as any claim's are. The answer goes
straight back to the claim loop: no task races the claim against the stop (a task group of
two, torn down after the answer, cost ~65 us of CPU per pickup, more on a cold cache:
docs/benchmarks/pickup.md).

It may touch the tracker's ``parked_claim`` only.
"""

from __future__ import annotations

import math
import uuid

import anyio

from tracker_client.bounds import MAX_WAIT_MS
from tracker_client.models import Lease
from tracker_client.protocol import ParksClaims

__all__ = ["park_claim"]


async def park_claim(
    parks: ParksClaims,
    stop: anyio.CancelScope,
    agent: str,
    role: str,
    ttl_ms: int,
    n: int,
    wait_s: float,
    key: str | None,
) -> list[Lease]:
    """Up to ``n`` leases of ``role``, waiting up to ``wait_s`` at the tracker; empty when none
    came or ``stop`` (the scope the worker's first stop cancels) was cancelled first (the claim
    is then cancelled at the tracker; cancelled before: nothing is sent). ``key``: the claim's
    idempotency key (its retries reuse it; a fresh one when None)."""
    if stop.cancel_called:
        return []
    with stop:
        return await parks.parked_claim(
            agent,
            role,
            ttl_ms,
            n,
            min(math.ceil(wait_s * 1000), MAX_WAIT_MS),  # a longer idle: parks again
            idempotency_key=key or str(uuid.uuid4()),
        )
    return []  # stopped
