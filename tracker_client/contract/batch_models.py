"""The wire models of the batching extensions: ``claim_many``, ``finish`` and ``finish_many``
(and their limits).

Pure data, imported by the contract table (:mod:`tracker_client.contract.table`), the
served tracker and the remote client; it imports pydantic only.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tracker_client.bounds import MAX_LEASE_TTL_MS, NonEmpty
from tracker_client.capabilities import LeaseRef
from tracker_client.contract.run_bodies import EventBody, FailBody, TransitionBody
from tracker_client.errors import TrackerError, ValidationFailed
from tracker_client.models import FailResult, Lease, TransitionResult

__all__ = [
    "MAX_CLAIM_MANY",
    "MAX_FINISH_EVENTS",
    "MAX_FINISH_MANY",
    "ClaimManyBody",
    "FinishBody",
    "FinishClaimBody",
    "FinishClaimEntry",
    "FinishItem",
    "FinishManyBody",
    "FinishManyEntry",
    "FinishManyItemBody",
    "FinishManyOutcome",
    "FinishManyResult",
    "FinishResult",
    "check_items",
    "per_state_of",
]

#: The most leases one ``claim_many`` hands out (a worker asks for its free slots).
MAX_CLAIM_MANY = 100
#: The most events one ``finish`` writes before its transition or fail.
MAX_FINISH_EVENTS = 100
#: The most runs one ``finish_many`` reports (a worker sends the reports of runs ending together).
MAX_FINISH_MANY = 100


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


class FinishBody(BaseModel):
    """``POST /runs/{run_id}/finish`` (extension ``finish``): the run's last events and its
    transition *or* its fail, written together (all or nothing)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    events: list[EventBody] = Field(default_factory=list)
    transition: TransitionBody | None = None
    fail: FailBody | None = None


class FinishResult(BaseModel):
    """What ``finish`` did: the events' ids, and the transition's or the fail's answer."""

    model_config = ConfigDict(defer_build=True)

    event_ids: list[int]
    transition: TransitionResult | None = None
    fail: FailResult | None = None


@dataclass(frozen=True)
class FinishItem:
    """One run's part of a ``finish_many``: what ``finish`` takes, with its lease and key.

    ``transition`` holds ``transition``'s fields (trigger, expected_stage,
    expected_task_version, instructions, usage, wait_for), ``fail`` ``fail``'s (error, usage,
    retryable); exactly one of them. Each item is written all or nothing, as ``finish`` writes.
    """

    lease: LeaseRef
    events: tuple[Mapping[str, Any], ...] = ()
    transition: Mapping[str, Any] | None = None
    fail: Mapping[str, Any] | None = None
    #: The item's own key: a replay answers the first answer (keyed as a ``finish`` would be).
    idempotency_key: str | None = None


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


#: What ``finish_many`` gives per item: its result, or the error that refused it (nothing of
#: that item written).
FinishManyOutcome = FinishResult | TrackerError


def check_items(items: Sequence[FinishItem]) -> None:
    """The batch's own limits (each item's are its ``finish``'s): a list of 1..
    :data:`MAX_FINISH_MANY` :class:`FinishItem`; ``ValidationFailed`` naming what is wrong."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise ValidationFailed("finish_many: items must be a list of FinishItem")
    if not 1 <= len(items) <= MAX_FINISH_MANY:
        raise ValidationFailed(
            f"finish_many: items: 1 to {MAX_FINISH_MANY}, got {len(items)}",
            code="too_many_items" if items else "invalid_request",
        )
    for i, item in enumerate(items):
        if not isinstance(item, FinishItem):
            raise ValidationFailed(
                f"finish_many: items[{i}]: expected a FinishItem, got {type(item).__name__}"
            )


def per_state_of(concurrency: object) -> dict[str, int]:
    """``concurrency.per_state`` as NullTickets reads it on ``claim``: stages whose value is a
    number > 0 (floats truncated); anything else is no limit."""
    raw = concurrency.get("per_state") if isinstance(concurrency, dict) else None
    out: dict[str, int] = {}
    if isinstance(raw, dict):
        for stage, value in raw.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and int(value) > 0:
                out[str(stage)] = int(value)
    return out
