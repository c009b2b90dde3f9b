"""``claim_many``: up to ``n`` leases of one role in one write (extension ``claim_many``).

A worker with several free slots asks once instead of once per slot: one housekeeping pass
(reclaim lapsed leases, expire past-deadline tasks) and one scan of the role's candidates for
all of them, in one transaction. The rules are ``claim``'s (:mod:`.claims`), applied as if the
claims were made one after the other: priority then creation order, unresolved dependencies
and other agents' assignments skipped, one lease per concurrency key (a key held, or taken by
an earlier pick of this batch, is skipped), ``per_state`` limits counting this batch's picks,
and the role's rate limit and cap asked before each lease (the batch stops when they refuse).

It touches what ``claim`` touches (tasks, runs, the rate-limit bucket, the idempotency record);
the picking rules are :mod:`.claims`' own helpers, reused, not copied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tracker_client.contract.batch_models import MAX_CLAIM_MANY
from tracker_client.errors import LeaseLost, ValidationFailed
from tracker_client.models import Lease, Task
from tracker_client.rules import claims
from tracker_client.rules.common import CorruptRow, Ctx, task_from_fields
from tracker_client.rules.idempotency import idempotent
from tracker_client.rules.leasekeys import rail_key
from tracker_client.rules.ratelimits import admit, spend
from tracker_client.rules.runs import dead_letter

__all__ = ["MAX_CLAIM_MANY", "check_n", "claim_many"]

#: A candidate row of the claim's scan, as a dict (:func:`_pick_many`).
Row = dict[str, Any]


def check_n(n: object) -> int:
    """``n`` must be an integer 1..:data:`MAX_CLAIM_MANY`; else ``ValidationFailed`` naming it."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CLAIM_MANY:
        raise ValidationFailed(
            f"claim_many: n must be an integer 1..{MAX_CLAIM_MANY}, got {n!r}", code="invalid_n"
        )
    return n


def claim_many(
    ctx: Ctx,
    agent_id: str,
    role: str,
    lease_ttl_ms: int,
    n: int,
    per_state: Mapping[str, object] | None,
    idempotency_key: str | None = None,
) -> list[Lease]:
    """Up to ``n`` leases of ``role`` for ``agent_id``, best first (empty: no work); their
    tokens derived from ``idempotency_key`` when given (:mod:`.leasekeys`)."""
    claims.check_ttl(lease_ttl_ms)
    check_n(n)
    if not isinstance(agent_id, str) or not agent_id:
        raise ValidationFailed("agent_id must be a non-empty string")
    if not isinstance(role, str) or not role:
        raise ValidationFailed("role must be a non-empty string")
    lapsed, overdue = claims.housekeeping(ctx)
    if lapsed:
        claims.reclaim_expired(ctx)
    if overdue:
        claims.expire_deadlines(ctx)
    picks, corrupt = _pick_many(ctx, agent_id, role, claims.per_state_limits(per_state), n)
    for row, error in corrupt:  # after the scan: no write while its cursor is open
        ctx.event(row["id"], None, "corrupt_row", {"reason": "corrupt_row", "error": error})
        dead_letter(ctx, row, "corrupt_row", None)
    leases: list[Lease] = []
    if not picks:
        return leases
    # A role without a limit row (the first answer None) gets none within this write: asked
    # once. With one, it is asked again before each lease (the previous one spent a token).
    allowed, rate_limit = admit(ctx, role)
    if not allowed:
        return leases
    secret = None if idempotency_key is None else rail_key(ctx)  # once for the batch
    if rate_limit is None and not ctx.will_log("task_claimed"):
        return claims.lease_all(ctx, picks, agent_id, role, lease_ttl_ms, idempotency_key, secret)
    for row, parsed in picks:
        if rate_limit is not None and leases:
            allowed, rate_limit = admit(ctx, role)
            if not allowed:
                break
        leases.append(
            claims._lease(ctx, row, parsed, agent_id, role, lease_ttl_ms, idempotency_key, secret)
        )
        if rate_limit is not None:
            spend(ctx, rate_limit)
    return leases


def _pick_many(
    ctx: Ctx, agent_id: str, role: str, limits: Mapping[str, int], n: int
) -> tuple[list[tuple[Row, Task]], list[tuple[Row, str]]]:
    """The best ``n`` eligible rows (parsed), and the unreadable ones met on the way."""
    now = ctx.now
    stage_counts: dict[str, int] = {}
    keys: set[str] = set()
    picks: list[tuple[Row, Task]] = []
    corrupt: list[tuple[Row, str]] = []
    cursor = ctx.exec("claims.candidates", (role, now, now))
    # Each row as a dict: read by name a dozen times here and in the lease (a sqlite3.Row
    # scans its columns for each name), and the Task is made of a dict anyway. Made here
    # from the row's values (no row factory: a Python call per row from C).
    names = tuple(d[0] for d in cursor.description)
    cursor.row_factory = None
    for values in cursor:
        cand = dict(zip(names, values, strict=True))
        seq = cand["seq"]
        assignee = cand["assignee"]
        if assignee is not None and assignee != agent_id:
            continue
        if cand["has_deps"] and ctx.one("claims.unresolved", (seq,)) is not None:
            continue
        key = cand["concurrency_key"]
        if key is not None and (key in keys or ctx.one("claims.key_held", (key, now, seq))):
            continue
        stage = cand["stage"]
        limit = limits.get(stage)
        if limit is not None:
            held = stage_counts.get(stage)
            if held is None:
                held = int(ctx.scalar("claims.stage_leases", (now, stage)))
            if held >= limit:
                continue
            stage_counts[stage] = held + 1
        try:
            parsed = task_from_fields(cand, strict=True)
        except CorruptRow as exc:
            corrupt.append((cand, str(exc)))
            continue
        if key is not None:
            keys.add(key)
        picks.append((cand, parsed))
        if len(picks) == n:
            break
    return picks, corrupt


def keyed_claim_many(
    c: Ctx,
    claim: Callable[[Ctx, str, str, int, int, Mapping[str, int] | None, str | None], list[Lease]],
    idempotency_key: str | None,
    agent_id: str,
    agent_role: str,
    lease_ttl_ms: int,
    n: int,
    limits: Mapping[str, int] | None,
    *,
    record_empty: bool = True,
) -> list[Lease]:
    """``claim(c, ...)`` under ``idempotency_key`` (the transaction's own): a replay answers
    the leases the first one got, with the same tokens (derived from the key, see
    :mod:`.leasekeys`), leaving out one gone since. ``claim`` is the rail's own
    ``claim_many`` (this module's, or the PostgreSQL rail's one statement);
    ``record_empty=False``: a claim that leased nothing is not recorded (a parked claim's
    attempt, :mod:`.parked`)."""

    def replay(record: object) -> list[Lease]:
        out: list[Lease] = []
        for item in record if isinstance(record, list) else []:
            try:
                out.append(claims.reissue(c, item["lease_id"], item["run_id"], idempotency_key))
            except LeaseLost:
                continue  # expired or finished since: not handed out again
        return out

    return idempotent(
        c,
        idempotency_key,
        "claim_many",
        [agent_id, agent_role, lease_ttl_ms, n, limits],
        lambda: claim(c, agent_id, agent_role, lease_ttl_ms, n, limits, idempotency_key),
        lambda leases: [{"lease_id": x.lease_id, "run_id": x.run.id} for x in leases],
        replay,
        record_empty=record_empty,
    )
