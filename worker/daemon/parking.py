"""The idle worker's parked claim: one claim that waits at the tracker until work comes.

An idle worker otherwise waits for the tracker's wake-up (:class:`~worker.daemon.watch.
TrackerWatch`) and then claims: over HTTP, two answers and a request between a submit and the
executor's start. Where the rail declares the extension ``parked_claim`` (``tracker serve``),
the claim loop's probe after an empty round is instead a parked claim that waits up to the idle
delay and leases the work as it comes (docs/operate/rails.md).

A stop must not strand a lease: the parked claim is raced against the worker's ``stopping``
event, and cancelling it cancels it at the tracker under its key (the client sends
``cancel_parked_claim``, and the tracker releases whatever it leased: no attempt counted).
Leases answered before the stop are the claim loop's, as any claim's are.

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
    stopping: anyio.Event,
    agent: str,
    role: str,
    ttl_ms: int,
    n: int,
    wait_s: float,
    key: str | None,
) -> list[Lease]:
    """Up to ``n`` leases of ``role``, waiting up to ``wait_s`` at the tracker; empty when none
    came or ``stopping`` was set first (the claim is then cancelled at the tracker). ``key``:
    the claim's idempotency key (its retries reuse it; a fresh one when None)."""
    leases: list[Lease] = []
    error: Exception | None = None
    if stopping.is_set():
        return leases
    async with anyio.create_task_group() as tg:

        async def claim() -> None:
            nonlocal leases, error
            try:
                leases = await parks.parked_claim(
                    agent,
                    role,
                    ttl_ms,
                    n,
                    min(math.ceil(wait_s * 1000), MAX_WAIT_MS),  # a longer idle: parks again
                    idempotency_key=key or str(uuid.uuid4()),
                )
            except Exception as exc:  # raised as itself below, not as a group
                error = exc
            tg.cancel_scope.cancel()

        async def stop() -> None:
            await stopping.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(claim)
        tg.start_soon(stop)
    if error is not None:
        raise error
    return leases
