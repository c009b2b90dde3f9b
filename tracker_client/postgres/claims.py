"""The PostgreSQL claim: one statement (``sql/claim.sql``) picks and leases the best task.

Claims of every host run at once: the transaction holds the rail's write lock in shared mode
(other writes take it exclusively). What only one claim at a time may do raises
:class:`~.db.NeedExclusive` and the claim runs again holding the lock alone: housekeeping (lapsed
leases, past deadlines), a ``per_state`` limit (a count), a role with a rate limit or cap (its
token bucket), a corrupt row. A second live lease on one concurrency key is refused by a unique
index (schema 4) and also sends the claim round again alone.

Around the statement, in the same transaction, the embedded rail's own steps: the
housekeeping a claim does first (reclaim expired leases, dead-letter past-deadline tasks), the
role's fleet-wide rate limit and cap (:mod:`tracker_client.rules.ratelimits`: admitted
before, a token spent after), and a row that cannot be read (its stored JSON is broken)
dead-lettered as ``corrupt_row`` instead of handed out. Runs on a pool thread inside the rail's
write transaction.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from tracker_client.errors import ValidationFailed
from tracker_client.models import Lease, Run, Task
from tracker_client.postgres.dialect import STATEMENTS, NeedExclusive, PgConn, Row
from tracker_client.rules.checkpoints import previous_checkpoint
from tracker_client.rules.claim_many import check_n
from tracker_client.rules.claims import (
    check_ttl,
    expire_deadlines,
    fresh_ids,
    per_state_limits,
    reclaim_expired,
    started_run,
)
from tracker_client.rules.common import CorruptRow, Ctx, task_from_row, will_log
from tracker_client.rules.leasekeys import keyed_token, rail_key
from tracker_client.rules.ratelimits import admit, spend
from tracker_client.rules.runs import dead_letter, token_hash

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "CLAIM_CALL",
    "CLAIM_SQL",
    "array_literal",
    "claim",
    "claim_many",
    "lease_of",
    "lease_of_row",
    "refuse_leased",
]

log = logging.getLogger("backlog_worker.tracker")

#: The claim statement (psycopg placeholders).
CLAIM_SQL = STATEMENTS["claim.one"]


def claim(
    ctx: Ctx,
    agent_id: str,
    role: str,
    lease_ttl_ms: int,
    per_state: Mapping[str, object] | None,
    idempotency_key: str | None = None,
) -> Lease | None:
    """Claim the best eligible task of ``role`` for ``agent_id``, or None (the token derived
    from ``idempotency_key`` when given, :mod:`tracker_client.rules.leasekeys`)."""
    admitted = _prepare(ctx, agent_id, role, lease_ttl_ms, per_state)
    if admitted is None:
        return None
    return _claim_one(ctx, agent_id, role, lease_ttl_ms, *admitted, idempotency_key)


def claim_many(
    ctx: Ctx,
    agent_id: str,
    role: str,
    lease_ttl_ms: int,
    n: int,
    per_state: Mapping[str, object] | None,
    idempotency_key: str | None = None,
) -> list[Lease]:
    """Up to ``n`` leases of ``role``, best first: the one-statement claim ``n`` times in one
    transaction (each ``SKIP LOCKED``, so claims of other hosts run beside it). The rules are
    the claim's; a rate-limited role (run alone) is admitted again before each lease, as the
    embedded ``claim_many`` does."""
    check_n(n)
    admitted = _prepare(ctx, agent_id, role, lease_ttl_ms, per_state)
    leases: list[Lease] = []
    while admitted is not None and len(leases) < n:
        lease = _claim_one(ctx, agent_id, role, lease_ttl_ms, *admitted, idempotency_key)
        if lease is None:
            break
        leases.append(lease)
        if admitted[1] is not None:  # a token was spent: the next lease is admitted afresh
            allowed, rate_limit = admit(ctx, role)
            admitted = (admitted[0], rate_limit) if allowed else None
    return leases


def _prepare(
    ctx: Ctx,
    agent_id: str,
    role: str,
    lease_ttl_ms: int,
    per_state: Mapping[str, object] | None,
) -> tuple[str, sqlite3.Row | None] | None:
    """Check the arguments, do the housekeeping, admit the role: (the per_state limits as
    JSON, the role's rate-limit row or None), or None when the role may not lease now."""
    check_ttl(lease_ttl_ms)
    if not isinstance(agent_id, str) or not agent_id:
        raise ValidationFailed("agent_id must be a non-empty string")
    if not isinstance(role, str) or not role:
        raise ValidationFailed("role must be a non-empty string")
    now = ctx.now
    raw = ctx.conn
    assert isinstance(raw, PgConn)  # the PostgreSQL rail's Ctx
    # The claim's housekeeping question and whether the role has a rate limit or cap, in one
    # round trip (a role without one skips the token bucket's read).
    preflight = ctx.one("claim.preflight", {"now": now, "role": role})
    assert preflight is not None  # one row of three EXISTS
    lapsed, overdue, limited_role = preflight
    limited = per_state_limits(per_state)
    if raw.shared and (lapsed or overdue or limited):
        raise NeedExclusive  # housekeeping writes, per_state counts: one claim at a time
    if lapsed:
        reclaim_expired(ctx)
    if overdue:
        expire_deadlines(ctx)
    allowed, rate_limit = admit(ctx, role) if limited_role else (True, None)
    if raw.shared and rate_limit is not None:
        raise NeedExclusive  # a rate or cap of the role: its tokens and count, one at a time
    if not allowed:
        return None
    return json.dumps(limited), rate_limit


def _claim_one(
    ctx: Ctx,
    agent_id: str,
    role: str,
    lease_ttl_ms: int,
    limits: str,
    rate_limit: sqlite3.Row | None,
    idempotency_key: str | None = None,
) -> Lease | None:
    """Run the claim statement (a corrupt row met is dead-lettered and the scan goes on)."""
    now = ctx.now
    raw = ctx.conn
    assert isinstance(raw, PgConn)
    key = None if idempotency_key is None else rail_key(ctx)
    while True:
        # the run id leads with the time: runs_pkey and events_run grow at their right edge
        # (docs/benchmarks/retention.md)
        run_id, lease_id, token = fresh_ids(now)
        if key is not None and idempotency_key is not None:
            token = keyed_token(key, lease_id, idempotency_key)
        params = {
            "role": role,
            "agent": agent_id,
            "now": now,
            "expires": now + lease_ttl_ms,
            "ttl": lease_ttl_ms,
            "limits": limits,
            "run_id": run_id,
            "lease_id": lease_id,
            "token_sha256": token_hash(token),
        }
        raw.flush()  # the claim is a server-side (prepared) statement on the connection itself
        with raw.raw.cursor() as cur:
            cur.execute(CLAIM_SQL, params)
            row: Row | None = cur.fetchone()
        if row is None:
            return None
        try:
            task = task_from_row(row, strict=True)
        except CorruptRow as exc:
            if raw.shared:
                raise NeedExclusive from exc
            _refuse_corrupt(ctx, row, run_id, str(exc))
            continue
        if rate_limit is not None:
            spend(ctx, rate_limit)
        return lease_of(ctx, row, task, run_id, lease_id, token, agent_id, role)


def _refuse_corrupt(ctx: Ctx, row: Row, run_id: str, error: str) -> None:
    """Undo the lease of an unreadable row and dead-letter it, naming why (the role goes on)."""
    ctx.exec("claim.undo_run", (run_id,))
    ctx.exec("claim.undo_lease", (row["seq"],))
    fresh = ctx.task_row(row["id"])
    ctx.event(row["id"], None, "corrupt_row", {"reason": "corrupt_row", "error": error})
    dead_letter(ctx, fresh, "corrupt_row", None)


def lease_of(
    ctx: Ctx,
    row: Row,
    task: object,
    run_id: str,
    lease_id: str,
    token: str,
    agent_id: str,
    role: str,
) -> Lease:
    """The :class:`Lease` of a row the claim statement leased (a log line for the claim)."""
    attempt = int(row["last_attempt"])
    run = Run.model_validate(
        {
            "id": run_id,
            "task_id": row["id"],
            "attempt": attempt,
            "status": "running",
            "agent_id": agent_id,
            "agent_role": role,
            "started_at_ms": ctx.now,
            "ended_at_ms": None,
            "error": None,
            "usage": None,
        }
    )
    if ctx.will_log("task_claimed"):  # else not even the message is made
        ctx.log(
            "task_claimed",
            f"task {row['id']} claimed by {agent_id} (attempt {attempt})",
            task_id=row["id"],
            run_id=run_id,
            role=role,
            agent_id=agent_id,
        )
    return Lease.model_validate(
        {
            "task": task,
            "run": run,
            "lease_id": lease_id,
            "lease_token": token,  # pydantic wraps it in SecretStr
            "expires_at_ms": int(row["lease_expires_at_ms"]),
            "previous_checkpoint": previous_checkpoint(ctx, row),  # type: ignore[arg-type]
        }
    )


#: The ``Task`` model's fields a ``tasks`` row holds (its metadata parsed apart).
_TASK_FIELDS = tuple(name for name in Task.model_fields if name != "metadata")


def lease_of_row(
    row: Row, now: int, run_id: str, lease_id: str, token: str, agent_id: str, role: str
) -> Lease | None:
    """:func:`lease_of` of a row ``bw_claim`` leased, validated in ONE pass (the task and the
    run nested in the lease's fields: a claim of ten built 30 models, three per lease, each a
    pass through pydantic). None when it must be built the other way: the row says a run
    wrote a checkpoint (read first), a ``task_claimed`` line is wanted
    (:meth:`~tracker_client.rules.common.Ctx.will_log`), the task's metadata is not ``{}``
    (parsed and checked there), or the row does not read as a task
    (:func:`~tracker_client.rules.common.task_from_row` names why, and the claim refuses it
    alone). The same ``Lease`` either way: the same fields, the same models' validation."""
    if row["checkpointed"] or will_log("task_claimed") or row["metadata"] != "{}":
        return None  # (a metadata other than {} is parsed and checked there: task_from_row)
    # Only the task's own fields: the model ignores the row's other columns (the lease's, the
    # budgets' counters ...), but its validation of the whole row paid for each of them about
    # as much as for the fields themselves (a lease of a 47-column row: 17-18 us, 9-10 now).
    fields = row.pick(_TASK_FIELDS)
    fields["metadata"] = {}
    try:
        return Lease.model_validate(
            {
                "task": fields,
                "run": started_run(
                    run_id, fields["id"], int(row["last_attempt"]), agent_id, role, now
                ),
                "lease_id": lease_id,
                "lease_token": token,  # pydantic wraps it in SecretStr
                "expires_at_ms": int(row["lease_expires_at_ms"]),
                "previous_checkpoint": None,
            }
        )
    except ValidationError:
        return None  # built the other way, which names what is wrong


#: ``bw_claim_tx`` (schema 9): the lock, ``bw_claim`` and the wake-ups in one statement.
CLAIM_CALL = STATEMENTS["claim.many_tx"]


def array_literal(values: list[str]) -> str:
    """A PostgreSQL array literal of ids and hex digests (no character there needs quoting)."""
    return "{" + ",".join(values) + "}"


def refuse_leased(ctx: Ctx, row: Row, run_id: str, error: str) -> None:
    """Refuse a corrupt row ``bw_claim`` leased, if the lease is still that claim's."""
    held = ctx.scalar("claim.lease_run", (row["seq"],))
    if held == run_id:
        ctx.exec("claim.cancel_run", (run_id,))
        _refuse_corrupt(ctx, row, run_id, error)
