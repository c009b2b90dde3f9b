"""``finish``: a run's last events and its transition or fail in one write (extension ``finish``).

A worker ending a run writes its last events (an ``error`` event before a fail, say) and then
its report: two or more requests over the wire, and a window in which the events are written
but the report is not. ``finish`` is one write: the events and then ``transition`` or ``fail``,
with ``add_event``'s, ``transition``'s and ``fail``'s own checks, in one transaction; when any
part is refused (a lost lease, an invalid trigger, a stale version) nothing is written.

It touches what those three touch, through :mod:`.runs`; and the idempotency record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from tracker_client.contract.batch_models import MAX_FINISH_EVENTS, FinishResult
from tracker_client.errors import ValidationFailed
from tracker_client.rules import runs
from tracker_client.rules.common import Ctx
from tracker_client.rules.idempotency import idempotent

__all__ = ["Prepared", "encode", "finish", "finish_keyed", "keyed_args", "prepare"]

Part = BaseModel | Mapping[str, Any]


def _plain(value: Part | None) -> dict[str, Any] | None:
    """A body part as a dict (the served tracker passes models, a caller may pass dicts)."""
    if value is None:
        return None
    if type(value) is dict:  # a worker's report: no walk of the ABCs below (~0.5 us each)
        return dict(value)
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, Mapping):
        return dict(value)
    raise ValidationFailed(f"finish: expected an object, got {type(value).__name__}")


#: A ``finish`` checked and made plain: (events, transition, fail).
Prepared = tuple[list[dict[str, Any]], dict[str, Any] | None, dict[str, Any] | None]


def prepare(events: Sequence[Part], transition: Part | None, fail: Part | None) -> Prepared:
    """``finish``'s parts checked (exactly one of transition and fail, at most
    :data:`MAX_FINISH_EVENTS` events) and made plain dicts; ``ValidationFailed`` otherwise."""
    if (transition is None) == (fail is None):
        raise ValidationFailed(
            "finish: give exactly one of transition or fail", code="invalid_finish"
        )
    if type(events) is not tuple and (
        isinstance(events, str | bytes) or not isinstance(events, Sequence)
    ):
        raise ValidationFailed("finish: events must be a list of {kind, data}")
    if len(events) > MAX_FINISH_EVENTS:
        raise ValidationFailed(
            f"finish: events: at most {MAX_FINISH_EVENTS}, got {len(events)}",
            code="too_many_events",
        )
    plain = [_plain(e) or {} for e in events]
    return plain, _plain(transition), _plain(fail)


def finish(
    ctx: Ctx,
    run_id: str,
    digest: str,
    events: list[dict[str, Any]],
    transition: dict[str, Any] | None,
    fail: dict[str, Any] | None,
    rng: Any,
) -> FinishResult:
    """Write ``events``, then the transition or the fail (the caller's one transaction)."""
    ids = [runs.add_event(ctx, run_id, digest, e.get("kind", ""), e.get("data")) for e in events]
    if transition is not None:
        waits = transition.get("wait_for") or []
        moved = runs.transition(
            ctx,
            run_id,
            digest,
            transition.get("trigger"),  # type: ignore[arg-type]  # checked there
            transition.get("expected_stage"),
            transition.get("expected_task_version"),
            transition.get("instructions"),
            transition.get("usage"),
            waits if isinstance(waits, str) else list(waits),
        )
        return FinishResult(event_ids=ids, transition=moved)
    assert fail is not None
    failed = runs.fail(
        ctx,
        run_id,
        digest,
        fail.get("error"),  # type: ignore[arg-type]  # checked there
        fail.get("usage"),
        rng,
        bool(fail.get("retryable", True)),
    )
    return FinishResult(event_ids=ids, fail=failed)


def finish_keyed(
    ctx: Ctx, run_id: str, digest: str, parts: Prepared, rng: Any, key: str | None
) -> FinishResult:
    """:func:`finish` under the idempotency record of ``key`` (a replay answers the first
    answer): what one ``finish`` and each item of a ``finish_many`` write."""
    plain, moved, failed = parts
    return idempotent(
        ctx,
        key,
        "finish",
        keyed_args(run_id, digest, parts),
        lambda: finish(ctx, run_id, digest, plain, moved, failed, rng),
        encode,
        FinishResult.model_validate,
    )


def keyed_args(run_id: str, digest: str, parts: Prepared) -> list[Any]:
    """The arguments a keyed ``finish`` is fingerprinted by (a replay must repeat them)."""
    plain, moved, failed = parts
    return [run_id, digest, plain, moved, failed]


def encode(result: FinishResult) -> dict[str, Any]:
    """A ``finish``'s answer as its idempotency record keeps it."""
    return result.model_dump(mode="json")
