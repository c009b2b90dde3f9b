"""The batching extensions' limits and what a rail answers and takes in-process: ``finish``'s
result, a ``finish_many`` item and its outcome, and their checks.

Every worker imports these; their request and answer bodies on the wire are in
:mod:`tracker_client.contract.batch_bodies`, which only the wire reads (issue 31).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from tracker_client.capabilities import LeaseRef
from tracker_client.errors import TrackerError, ValidationFailed
from tracker_client.models import FailResult, TransitionResult

__all__ = [
    "MAX_CLAIM_MANY",
    "MAX_FINISH_EVENTS",
    "MAX_FINISH_MANY",
    "FinishItem",
    "FinishManyOutcome",
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


class FinishResult(BaseModel):
    """What ``finish`` did: the events' ids, and the transition's or the fail's answer."""

    model_config = ConfigDict(defer_build=True)

    event_ids: list[int]
    transition: TransitionResult | None = None
    fail: FailResult | None = None


@dataclass(slots=True)
class FinishItem:
    """One run's part of a ``finish_many``: what ``finish`` takes, with its lease and key.

    ``transition`` holds ``transition``'s fields (trigger, expected_stage,
    expected_task_version, instructions, usage, wait_for), ``fail`` ``fail``'s (error, usage,
    retryable); exactly one of them. Each item is written all or nothing, as ``finish`` writes.

    Built once per run and only read after (never changed: a retry builds its own). Not a
    frozen dataclass: its ``__init__`` would set each field through ``object.__setattr__``
    (~1,300 instructions a field on CPython 3.11, ~6.7k per run); slots keep its reads as
    cheap as an instance's.
    """

    lease: LeaseRef
    events: tuple[Mapping[str, Any], ...] = ()
    transition: Mapping[str, Any] | None = None
    fail: Mapping[str, Any] | None = None
    #: The item's own key: a replay answers the first answer (keyed as a ``finish`` would be).
    idempotency_key: str | None = None


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
