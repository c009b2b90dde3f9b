"""The wire models of the ``parked_claim`` extension: a claim that waits at the rail for work.

A parked claim is ``claim_many``'s body and ``wait_ms``: the rail leases as soon as work is
claimable (or answers an empty list after ``wait_ms``), so an idle worker's pickup is one
answer instead of a wake-up and a claim (docs/operate/rails.md). Its ``Idempotency-Key`` is
required: a retry under it answers the same leases, and ``cancel_parked_claim`` under it stops
the claim and gives back whatever it leased.

What the rails use: the cancel's answer and the key's check; the claim's body is with the other
wire bodies (:mod:`tracker_client.contract.batch_bodies`, issue 31). Pure data: imports
pydantic only.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tracker_client.bounds import MAX_WAIT_MS
from tracker_client.errors import ValidationFailed

__all__ = ["MAX_PARKED_KEY_CHARS", "ParkedCancelled", "check_parked"]

#: The longest key of a parked claim (its attempts' keys add ``/<i>`` within the 255 of a key).
MAX_PARKED_KEY_CHARS = 240


class ParkedCancelled(BaseModel):
    """The answer of ``POST /leases/claim-parked/cancel``: how many leases the parked claim
    of that key had taken and were given back (released: no attempt counted)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    released: int


def check_parked(idempotency_key: str | None, wait_ms: int) -> str:
    """The parked claim's key, or ``ValidationFailed`` naming what is wrong (no key: a parked
    claim could be neither retried nor cancelled; a wait outside 0..60000 ms)."""
    if not idempotency_key:
        raise ValidationFailed(
            "parked_claim needs an idempotency key (the Idempotency-Key header): without it a "
            "lost answer could be neither retried nor cancelled",
            code="idempotency_key_required",
        )
    if len(idempotency_key) > MAX_PARKED_KEY_CHARS:
        raise ValidationFailed(
            f"parked_claim: idempotency key over {MAX_PARKED_KEY_CHARS} characters",
            code="invalid_idempotency_key",
        )
    if isinstance(wait_ms, bool) or not 0 <= wait_ms <= MAX_WAIT_MS:
        raise ValidationFailed(
            f"parked_claim: wait_ms must be 0..{MAX_WAIT_MS}, got {wait_ms}",
            code="invalid_request",
        )
    return idempotency_key
