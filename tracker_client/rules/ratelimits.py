"""Fleet-wide rate limits and concurrency caps per role, stored in the rail (extension
``rate_limits``).

A limit is a row of ``rate_limits`` (schema 0004): a rate ``N/period`` kept as a token bucket
(``N`` tokens, refilled evenly over the period; a full bucket allows a burst of ``N``) and/or
``max_running``, a cap on the role's tasks leased at once. The claim (:mod:`.claims`) asks
:func:`admit` before it looks for a task and calls :func:`spend` after it leased one, both in the
claim's own write transaction (``BEGIN IMMEDIATE``): two workers, in one process or many, cannot
both take the last token or the last slot. A refused claim answers no work for that role only;
other roles' claims are not held back.

This room touches the ``rate_limits`` table and reads the count of a role's leased tasks.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.rules.common import Ctx

if TYPE_CHECKING:
    import sqlite3

    from tracker_client.schedule_models import RateLimit

__all__ = [
    "PERIODS_MS",
    "admit",
    "clear_limit",
    "list_limits",
    "parse_rate",
    "set_limit",
    "spend",
]

#: The periods a rate may name, in milliseconds.
PERIODS_MS = {"s": 1_000, "sec": 1_000, "min": 60_000, "m": 60_000, "h": 3_600_000}
#: The most tokens a rate may give per period (and the largest ``max_running``).
MAX_COUNT = 1_000_000

_RATE = re.compile(r"\s*(\d+)\s*(?:/|per\s+)\s*(s|sec|min|m|h)\s*", re.IGNORECASE)


def parse_rate(text: object) -> tuple[int, int]:
    """``"20/min"`` (or ``"5 per s"``) as (tokens, period in ms); ``ValidationFailed`` naming
    ``rate`` for anything else, a count of 0, a negative count or one over a million."""
    if not isinstance(text, str):
        raise ValidationFailed(f"rate: must be a string like '20/min', got {text!r}")
    hit = _RATE.fullmatch(text)
    if hit is None:
        raise ValidationFailed(
            f"rate: {text!r} is not N/period (N >= 1, period s, min or h), e.g. '20/min'"
        )
    count = int(hit.group(1))
    if not 1 <= count <= MAX_COUNT:
        raise ValidationFailed(f"rate: {text!r}: N must be 1..{MAX_COUNT}")
    return count, PERIODS_MS[hit.group(2).lower()]


def _check_running(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise ValidationFailed(f"max_running: must be an integer 1..{MAX_COUNT}, got {value!r}")
    return value


def _tokens(row: sqlite3.Row, now: int) -> float:
    """The bucket's tokens at ``now`` (refilled since ``refilled_at_ms``, never over full)."""
    count, period = int(row["rate_count"]), int(row["period_ms"])
    elapsed = max(0, now - int(row["refilled_at_ms"]))
    return min(float(count), float(row["tokens"]) + elapsed * count / period)


def _canonical(count: int, period_ms: int) -> str:
    unit = {1_000: "s", 60_000: "min", 3_600_000: "h"}[period_ms]
    return f"{count}/{unit}"


def admit(ctx: Ctx, role: str) -> tuple[bool, sqlite3.Row | None]:
    """May a claim of ``role`` lease a task now? (allowed, the limit row to :func:`spend` on)."""
    row = ctx.one("ratelimits.get", (role,))
    if row is None:
        return True, None
    cap = row["max_running"]
    if cap is not None and int(ctx.scalar("ratelimits.running", (ctx.now, role))) >= int(cap):
        return False, row
    if row["rate_count"] is not None and _tokens(row, ctx.now) < 1.0:
        return False, row
    return True, row


def spend(ctx: Ctx, row: sqlite3.Row) -> None:
    """Take one token for a claim that leased a task (nothing to take without a rate)."""
    if row["rate_count"] is None:
        return
    ctx.exec("ratelimits.spend", (_tokens(row, ctx.now) - 1.0, ctx.now, row["role"]))


def _model(ctx: Ctx, row: sqlite3.Row) -> RateLimit:
    from tracker_client.schedule_models import RateLimit  # an operator's call (issue 31)

    data: dict[str, Any] = {
        "role": row["role"],
        "max_running": row["max_running"],
        "running": int(ctx.scalar("ratelimits.running", (ctx.now, row["role"]))),
        "updated_at_ms": row["updated_at_ms"],
    }
    if row["rate_count"] is not None:
        count, period = int(row["rate_count"]), int(row["period_ms"])
        tokens = _tokens(row, ctx.now)
        data.update(rate=_canonical(count, period), rate_count=count, period_ms=period)
        data["tokens"] = round(tokens, 3)
        if tokens < 1.0:
            data["next_token_at_ms"] = ctx.now + math.ceil((1.0 - tokens) * period / count)
    return RateLimit.model_validate(data)


def _row(ctx: Ctx, role: str) -> sqlite3.Row:
    row = ctx.one("ratelimits.get", (role,))
    if row is None:
        raise NotFound(f"role {role!r} has no rate limit", code="rate_limit_not_found")
    return row


def set_limit(ctx: Ctx, role: str, rate: object, max_running: object) -> RateLimit:
    """Store ``role``'s limit (replacing the one there); a bad field is ``ValidationFailed``
    naming it, and nothing is written. An unchanged rate keeps its bucket; a new one starts
    full."""
    if not isinstance(role, str) or not role.strip():
        raise ValidationFailed("role: must be a non-empty string")
    parsed = parse_rate(rate) if rate is not None else None
    cap = _check_running(max_running)
    if parsed is None and cap is None:
        raise ValidationFailed("rate: give a rate (N/period) and/or max_running")
    old = ctx.one("ratelimits.get", (role,))
    count, period = parsed if parsed is not None else (None, None)
    tokens, refilled = float(count or 0), ctx.now
    if old is not None and parsed is not None and (old["rate_count"], old["period_ms"]) == parsed:
        tokens, refilled = float(old["tokens"]), int(old["refilled_at_ms"])
    created = int(old["created_at_ms"]) if old is not None else ctx.now
    ctx.exec("ratelimits.put", (role, count, period, cap, tokens, refilled, created, ctx.now))
    return _model(ctx, _row(ctx, role))


def clear_limit(ctx: Ctx, role: str) -> RateLimit:
    """Remove ``role``'s limit (answers it as it was); ``NotFound`` when it has none."""
    row = _row(ctx, role)
    answer = _model(ctx, row)
    ctx.exec("ratelimits.delete", (role,))
    return answer


def list_limits(ctx: Ctx) -> list[RateLimit]:
    """Every role's limit, by role, with its tokens, next token and leased tasks."""
    return [_model(ctx, r) for r in ctx.all("ratelimits.list")]
