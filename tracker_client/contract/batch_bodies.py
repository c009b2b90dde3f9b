"""The request and answer bodies of the batching extensions on the wire: ``claim_many``,
``finish``, ``finish_many`` (with its riding claim, extension ``finish_claim``) and
``parked_claim``.

Apart from :mod:`tracker_client.contract.batch_models` (the limits, :class:`FinishResult`,
:class:`FinishItem`, what every worker uses) because only the wire reads them: the contract
table, the served tracker and the remote client. A worker on a rail in its own process (SQLite,
PostgreSQL) then does not create them, nor the run bodies they carry
(:mod:`tracker_client.contract.run_bodies`), as it starts (issue 31). Pure data: imports
pydantic only.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tracker_client.bounds import MAX_LEASE_TTL_MS, MAX_WAIT_MS, NonEmpty
from tracker_client.contract.batch_models import MAX_CLAIM_MANY, MAX_FINISH_MANY, FinishResult
from tracker_client.contract.run_bodies import EventBody, FailBody, TransitionBody
from tracker_client.models import Lease

__all__ = [
    "ClaimManyBody",
    "FinishBody",
    "FinishClaimBody",
    "FinishClaimEntry",
    "FinishManyBody",
    "FinishManyEntry",
    "FinishManyItemBody",
    "FinishManyResult",
    "ParkedClaimBody",
]


class ClaimManyBody(BaseModel):
    """``POST /leases/claim-many`` (extension ``claim_many``): ``claim``'s body and ``n``."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    agent_id: NonEmpty
    agent_role: NonEmpty
    lease_ttl_ms: int = Field(
        300_000, json_schema_extra={"minimum": 1, "maximum": MAX_LEASE_TTL_MS}
    )
    #: How many leases at most (1..:data:`MAX_CLAIM_MANY`); fewer when less work is eligible.
    n: int = Field(json_schema_extra={"minimum": 1, "maximum": MAX_CLAIM_MANY})
    concurrency: dict[str, Any] | None = None


class ParkedClaimBody(ClaimManyBody):
    """``POST /leases/claim-parked`` (extension ``parked_claim``): ``claim_many``'s body and
    how long to wait for work."""

    #: How long the claim waits at the rail for work (0..60000 ms) before answering ``[]``.
    wait_ms: int = Field(json_schema_extra={"minimum": 0, "maximum": MAX_WAIT_MS})


class FinishBody(BaseModel):
    """``POST /runs/{run_id}/finish`` (extension ``finish``): the run's last events and its
    transition *or* its fail, written together (all or nothing)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    events: list[EventBody] = Field(default_factory=list)
    transition: TransitionBody | None = None
    fail: FailBody | None = None


class FinishManyItemBody(FinishBody):
    """One item of ``POST /runs/finish-many``: a run, its lease token (the item's credential:
    the request itself carries the api token, as ``claim`` does), its key and its ``finish``."""

    run_id: str
    lease_token: str
    idempotency_key: str | None = None


class FinishClaimBody(ClaimManyBody):
    """The claim riding in a ``finish_many`` (extension ``finish_claim``): ``claim_many``'s body
    and its idempotency key (the request's ``Idempotency-Key`` header is not the claim's)."""

    idempotency_key: str | None = None


class FinishManyBody(BaseModel):
    """``POST /runs/finish-many`` (extension ``finish_many``): the final reports of up to
    :data:`MAX_FINISH_MANY` runs, each written all or nothing, independently of the others;
    with extension ``finish_claim``, ``claim``: a ``claim_many`` for the slots those runs
    freed, written after the items in the same write and answered under ``claim``."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    items: list[FinishManyItemBody] = Field(
        json_schema_extra={"minItems": 1, "maxItems": MAX_FINISH_MANY}
    )
    claim: FinishClaimBody | None = None


class FinishManyEntry(BaseModel):
    """One item's answer: its status as ``finish`` would have answered it, and its result
    (a success) or its error object (``{"code", "message", ...}``, as an error answer has)."""

    model_config = ConfigDict(defer_build=True)

    status: int
    result: FinishResult | None = None
    error: dict[str, Any] | None = None


class FinishClaimEntry(BaseModel):
    """The answer of the claim riding in a ``finish_many`` (extension ``finish_claim``): its
    status as ``claim_many`` would have answered it, and its leases (each with its token, as
    ``claim_many`` answers them) or its error object."""

    model_config = ConfigDict(defer_build=True)

    status: int
    leases: list[Lease] | None = None
    error: dict[str, Any] | None = None


class FinishManyResult(BaseModel):
    """``finish_many``'s answer: one entry per item, in the items' order; ``claim``: the riding
    claim's answer (extension ``finish_claim``; absent when the request had none)."""

    model_config = ConfigDict(defer_build=True)

    results: list[FinishManyEntry]
    claim: FinishClaimEntry | None = None
