"""The wire models of the batching extensions: ``claim_many`` and ``finish`` (and their limits).

Pure data, imported by the contract table (:mod:`tracker_client.nulltickets.contract`), the
served tracker and the remote client; it imports pydantic only.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tracker_client.models import FailResult, TransitionResult
from tracker_client.nulltickets.wire_models import EventBody, FailBody, TransitionBody

__all__ = [
    "MAX_CLAIM_MANY",
    "MAX_FINISH_EVENTS",
    "ClaimManyBody",
    "FinishBody",
    "FinishResult",
    "per_state_of",
]

#: The most leases one ``claim_many`` hands out (a worker asks for its free slots).
MAX_CLAIM_MANY = 100
#: The most events one ``finish`` writes before its transition or fail.
MAX_FINISH_EVENTS = 100


class ClaimManyBody(BaseModel):
    """``POST /leases/claim-many`` (extension ``claim_many``): ``claim``'s body and ``n``."""

    model_config = ConfigDict(extra="ignore")

    agent_id: str
    agent_role: str
    lease_ttl_ms: int = Field(300_000, json_schema_extra={"minimum": 1, "maximum": 86_400_000})
    #: How many leases at most (1..:data:`MAX_CLAIM_MANY`); fewer when less work is eligible.
    n: int = Field(json_schema_extra={"minimum": 1, "maximum": MAX_CLAIM_MANY})
    concurrency: dict[str, Any] | None = None


class FinishBody(BaseModel):
    """``POST /runs/{run_id}/finish`` (extension ``finish``): the run's last events and its
    transition *or* its fail, written together (all or nothing)."""

    model_config = ConfigDict(extra="ignore")

    events: list[EventBody] = Field(default_factory=list)
    transition: TransitionBody | None = None
    fail: FailBody | None = None


class FinishResult(BaseModel):
    """What ``finish`` did: the events' ids, and the transition's or the fail's answer."""

    event_ids: list[int]
    transition: TransitionResult | None = None
    fail: FailResult | None = None


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
