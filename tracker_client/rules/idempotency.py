"""Idempotency keys for writes: (key, operation) -> fingerprint of the arguments + the result.

Only successes are recorded (an error, or a claim that found no work, is never replayed). The
record is written in the same transaction as the write, so a retry after a lost answer either
sees the whole write and its record, or neither.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from tracker_client.errors import Conflict, ValidationFailed
from tracker_client.jsonlimits import MAX_JSON_DEPTH
from tracker_client.rules.common import Ctx

__all__ = ["fingerprint", "idempotent", "no_answer", "replay_none"]

R = TypeVar("R")


def fingerprint(args: Any) -> str:
    """SHA-256 of the canonical JSON of ``args`` (pydantic models are dumped first)."""
    try:
        text = _CANONICAL(args)
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"arguments are not JSON-serialisable: {exc}") from exc
    except RecursionError as exc:
        # The write itself would refuse it too (jsonlimits); this one is only reached first.
        raise ValidationFailed(
            f"arguments are nested too deep (limit {MAX_JSON_DEPTH} levels)", code="json_too_deep"
        ) from exc
    return hashlib.sha256(text.encode()).hexdigest()


def _default(value: Any) -> Any:
    """A pydantic model as its JSON dump (the canonical form's fallback)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except ValueError:
            # pydantic refuses to serialise a value nested past its own depth limit; the python
            # dump keeps the same JSON, and the write itself then refuses it naming our limit.
            return dump()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


#: The canonical JSON of a fingerprint, one encoder for every call (``json.dumps`` with these
#: options builds a new ``JSONEncoder`` each time: about a third of a fingerprint's cost).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_default).encode


def idempotent(
    ctx: Ctx,
    key: str | None,
    operation: str,
    args: Any,
    run: Callable[[], R],
    encode: Callable[[R], Any],
    decode: Callable[[Any], R],
    *,
    record_empty: bool = True,
) -> R:
    """Run ``run`` once per (key, operation); a same-argument replay decodes the record.
    ``record_empty=False``: an empty answer (nothing leased) is not recorded, as a ``claim``
    that found nothing never is: the key stays free, and the write commits nothing."""
    if key is None:
        return run()
    if not isinstance(key, str) or not key or len(key) > 255:
        raise ValidationFailed("idempotency_key must be a non-empty string of at most 255 chars")
    fp = fingerprint(args)
    row = ctx.one("idempotency.find", (key, operation))
    if row is not None:
        if row["fingerprint"] != fp:
            raise Conflict(
                f"idempotency key {key!r} was already used for a different {operation} request",
                code="idempotency_conflict",
            )
        return decode(json.loads(row["result"]))
    result = run()
    if (result is None and operation == "claim") or not (record_empty or result):
        return result
    ctx.exec(
        "idempotency.record",
        (key, operation, fp, json.dumps(encode(result), separators=(",", ":")), ctx.now),
    )
    return result


def no_answer(_: object) -> None:
    """Encoder of an operation whose answer is nothing (only "it happened" is recorded)."""
    return None


def replay_none(_: object) -> None:
    """Decoder of a recorded answer-less operation: the replay answers nothing too."""
    return None
