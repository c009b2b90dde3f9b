"""Claim, heartbeat, and the reclaim of expired leases and past-deadline tasks.

The claim is one indexed scan of the role's non-terminal, not-dead-lettered tasks in priority
then creation order, skipping delayed and leased rows inside the index; only rows with
dependencies, an assignee or a concurrency key (or a ``per_state`` limit) need a further query.
There is no candidate cap: the scan goes on until a task qualifies or the role has none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tracker_client.agent_models import UNSET
from tracker_client.errors import LeaseLost, ValidationFailed
from tracker_client.models import Lease, Task
from tracker_client.rules.checkpoints import previous_checkpoint, write_checkpoint
from tracker_client.rules.common import CorruptRow, Ctx, run_from_row, task_from_row, uuid4_hex
from tracker_client.rules.leasekeys import keyed_token, keyed_tokens, rail_key
from tracker_client.rules.ratelimits import admit, spend
from tracker_client.rules.runs import check_lease, dead_letter, forget, hand_out, token_hash

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "MAX_LEASE_TTL_MS",
    "claim",
    "expire_deadlines",
    "fresh_ids",
    "fresh_ids_many",
    "heartbeat",
    "housekeeping",
    "lease_all",
    "per_state_limits",
    "reclaim_expired",
    "reissue",
    "started_run",
    "withdraw",
]

#: Leases last 1 ms .. 24 h.
MAX_LEASE_TTL_MS = 86_400_000


def _uuid4(raw: bytes) -> str:
    """The canonical text of a version-4 UUID made of 16 random bytes (``uuid.UUID`` is slow)."""
    b = bytearray(raw)
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def started_run(
    run_id: str, task_id: str, attempt: int, agent_id: str, role: str, now: int
) -> dict[str, Any]:
    """The fields of the run a claim starts (status ``running``, nothing ended yet), as the
    ``Run`` model validates them: one place for every rail's claim (the PostgreSQL rail builds
    its leases from them too)."""
    return {
        "id": run_id,
        "task_id": task_id,
        "attempt": attempt,
        "status": "running",
        "agent_id": agent_id,
        "agent_role": role,
        "started_at_ms": now,
        "ended_at_ms": None,
        "error": None,
        "usage": None,
    }


def fresh_ids(now_ms: int | None = None) -> tuple[str, str, str]:
    """A run id, a lease id (UUIDv4) and a lease token (32 random bytes, hex): one urandom call.

    With ``now_ms`` the run id's first 48 bits are that time (the rest stays random, 74 bits,
    in the UUIDv4 layout): runs are keyed by id and their events indexed by it, so ids in
    creation order append to those b-trees where random ones wrote one page of each per run
    (a claim of ten and its finish then commit ~17 pages instead of ~31)."""
    raw = os.urandom(64)
    if now_ms is None:
        return _uuid4(raw[:16]), _uuid4(raw[16:32]), raw[32:].hex()
    run = (now_ms & 0xFFFF_FFFF_FFFF).to_bytes(6, "big") + raw[6:16]
    return _uuid4(run), _uuid4(raw[16:32]), raw[32:].hex()


def fresh_ids_many(now_ms: int, n: int, random_tokens: bool = True) -> list[tuple[str, str, str]]:
    """``n`` of :func:`fresh_ids` ``(now_ms)`` (a claim's batch): one urandom call and one hex
    conversion for all of them. ``random_tokens=False`` leaves the tokens empty, for a keyed
    claim that derives its own (:func:`~tracker_client.rules.leasekeys.keyed_token`)."""
    width = 128 if random_tokens else 64  # hex digits a lease takes
    h = os.urandom(width // 2 * n).hex()
    stamp = f"{now_ms & 0xFFFF_FFFF_FFFF:012x}"
    return [
        (uuid4_hex(stamp + h[i + 12 : i + 32]), uuid4_hex(h[i + 32 : i + 64]),
         h[i + 64 : i + width])
        for i in range(0, width * n, width)
    ]  # fmt: skip


def check_ttl(lease_ttl_ms: int) -> int:
    """``lease_ttl_ms`` must be an integer 1..86,400,000."""
    if (
        isinstance(lease_ttl_ms, bool)
        or not isinstance(lease_ttl_ms, int)
        or not 1 <= lease_ttl_ms <= MAX_LEASE_TTL_MS
    ):
        raise ValidationFailed(
            f"lease_ttl_ms must be an integer 1..{MAX_LEASE_TTL_MS}, got {lease_ttl_ms!r}",
            code="invalid_lease_ttl",
        )
    return lease_ttl_ms


def reclaim_expired(ctx: Ctx) -> tuple[int, int]:
    """Mark runs of expired leases ``stale`` and free their tasks; dead-letter crash loops.

    Returns (expired leases, tasks dead-lettered as ``crash_loop``).
    """
    rows = ctx.all("claims.lapsed", (ctx.now,))
    crash = 0
    for task_id, run_id in rows:
        ctx.exec("claims.stale_run", (ctx.now, run_id))
        ctx.exec("claims.drop_lapsed", (task_id,))
        task = ctx.task_row(task_id)
        ctx.log(
            "lease_expired",
            f"lease of task {task_id} expired; run {run_id} is stale",
            task_id=task_id,
            run_id=run_id,
            role=task["role"],
        )
        limit = task["max_stale_attempts"]
        limit_of = "task"
        if limit is None:
            limit, limit_of = ctx.opts.max_stale_attempts, "rail"
        if (
            limit > 0
            and task["stale_streak"] >= limit
            and task["dead_letter_reason"] is None
            and not task["terminal"]
        ):
            # The event names the count and the knob (the task's max_stale_attempts, or the
            # rail's option): what `task show` and the dashboard explain it with.
            detail = {
                "stale_runs": int(task["stale_streak"]),
                "max_stale_attempts": int(limit),
                "limit_of": limit_of,
            }
            dead_letter(ctx, task, "crash_loop", run_id, detail=detail)
            crash += 1
    leases, loops = ctx.swept
    ctx.swept = (leases + len(rows), loops + crash)  # counted once committed (tracker.sweeps)
    return len(rows), crash


def _live_upstreams(ctx: Ctx, task_id: str, has_deps: int) -> list[tuple[str, int]]:
    """The unfinished, not dead-lettered tasks ``task_id`` waits on, last first (to pop)."""
    if not has_deps:
        return []
    rows = ctx.all("claims.live_upstreams", (task_id,))
    return [(str(r[0]), int(r[1])) for r in reversed(rows)]


def _upstreams_first(ctx: Ctx, overdue: list[tuple[str, int]]) -> list[str]:
    """The overdue task ids, each after every overdue task it waits on (directly or through
    other unfinished tasks), else in creation order: a depth-first walk up the unfinished part
    of the dependency graph (cycles are refused when edges are added), each task once."""
    due = {task_id for task_id, _ in overdue}
    seen: set[str] = set()
    order: list[str] = []
    for root, root_deps in overdue:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, _live_upstreams(ctx, root, root_deps))]
        while stack:
            node, ups = stack[-1]
            if ups:
                up, up_deps = ups.pop()
                if up not in seen:
                    seen.add(up)
                    stack.append((up, _live_upstreams(ctx, up, up_deps)))
                continue
            stack.pop()
            if node in due:
                order.append(node)
    return order


def expire_deadlines(ctx: Ctx) -> int:
    """Dead-letter (reason ``expired``) waiting tasks past their deadline; running ones never.

    One dead letter per task and a reason that does not depend on creation order: when a task
    and a task it waits on pass their deadlines in the same pass, the upstream is expired first
    and the dependent follows it by the upstream-failure rule (``upstream_dead_lettered``, one
    ``dead_letter`` event naming the upstream; docs/guarantees/edge-cases.md). Returns how many
    tasks were dead-lettered ``expired`` (their dependents are not counted)."""
    rows = ctx.all("claims.overdue", (ctx.now, ctx.now))
    overdue = [(str(r[0]), int(r[1])) for r in rows]
    expired = 0
    for task_id in _upstreams_first(ctx, overdue):
        task = ctx.task_row(task_id)  # fresh: an expiry earlier in this pass may have reached it
        if task["dead_letter_reason"] is not None or task["terminal"]:
            continue
        dead_letter(ctx, task, "expired", None)
        expired += 1
    return expired


def housekeeping(ctx: Ctx) -> tuple[bool, bool]:
    """(a lease has lapsed, a waiting task is past its deadline): what a claim sweeps first."""
    row = ctx.one("claims.housekeeping", {"now": ctx.now})
    assert row is not None  # one row of two EXISTS
    return bool(row[0]), bool(row[1])


def per_state_limits(per_state: Mapping[str, object] | None) -> dict[str, int]:
    """A claim's ``per_state`` limits that limit (stage -> a count above 0), as NullTickets
    reads them."""
    out: dict[str, int] = {}
    for stage, value in (per_state or {}).items():
        # As NullTickets: only numbers > 0 limit (floats truncate); anything else is no limit.
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        n = int(value)
        if n > 0:
            out[str(stage)] = n
    return out


def claim(
    ctx: Ctx,
    agent_id: str,
    role: str,
    lease_ttl_ms: int,
    per_state: Mapping[str, object] | None,
    idempotency_key: str | None = None,
) -> Lease | None:
    """Claim the best eligible task of ``role`` for ``agent_id``, or None.

    With ``idempotency_key`` the lease token is derived from it (:mod:`.leasekeys`), so a
    replay of this claim (:func:`reissue`) answers the same token."""
    check_ttl(lease_ttl_ms)
    if not isinstance(agent_id, str) or not agent_id:
        raise ValidationFailed("agent_id must be a non-empty string")
    if not isinstance(role, str) or not role:
        raise ValidationFailed("role must be a non-empty string")
    lapsed, overdue = housekeeping(ctx)
    if lapsed:
        reclaim_expired(ctx)
    if overdue:
        expire_deadlines(ctx)
    limits = per_state_limits(per_state)
    allowed, rate_limit = admit(ctx, role)  # the role's fleet-wide rate and cap (extension)
    if not allowed:
        return None
    while True:
        picked = _pick(ctx, agent_id, role, limits)
        if picked is None:
            return None
        try:
            parsed = task_from_row(picked, strict=True)
        except CorruptRow as exc:
            # One unreadable row must not stop the role: dead-letter it, naming why, and go on.
            ctx.event(
                picked["id"], None, "corrupt_row", {"reason": "corrupt_row", "error": str(exc)}
            )
            dead_letter(ctx, picked, "corrupt_row", None)
            continue
        lease = _lease(ctx, picked, parsed, agent_id, role, lease_ttl_ms, idempotency_key)
        if rate_limit is not None:
            spend(ctx, rate_limit)
        return lease


def _pick(ctx: Ctx, agent_id: str, role: str, limits: Mapping[str, int]) -> sqlite3.Row | None:
    """The best eligible row of ``role`` for ``agent_id`` (None when there is none)."""
    now = ctx.now
    stage_counts: dict[str, int] = {}
    task = None
    for cand in ctx.exec("claims.candidates", (role, now, now)):
        seq = cand["seq"]
        assignee = cand["assignee"]
        if assignee is not None and assignee != agent_id:
            continue
        if cand["has_deps"] and ctx.one("claims.unresolved", (seq,)) is not None:
            continue
        key = cand["concurrency_key"]
        if key is not None and ctx.one("claims.key_held", (key, now, seq)):
            continue
        stage = cand["stage"]
        limit = limits.get(stage)
        if limit is not None:
            held = stage_counts.get(stage)
            if held is None:
                held = int(ctx.scalar("claims.stage_leases", (now, stage)))
                stage_counts[stage] = held
            if held >= limit:
                continue
        task = cand
        break
    return task


def _lease(
    ctx: Ctx,
    task: Any,
    parsed: Task,
    agent_id: str,
    role: str,
    lease_ttl_ms: int,
    idempotency_key: str | None = None,
    secret: bytes | None = None,
) -> Lease:
    """Lease the picked row to ``agent_id``: a new run, the lease on the task row (its token
    derived from ``idempotency_key`` when given, else random; ``secret``: the rail's key
    when the caller read it already, once for a batch of leases), and its log line."""
    if idempotency_key is not None and secret is None:
        secret = rail_key(ctx)
    (lease,) = lease_all(
        ctx, [(task, parsed)], agent_id, role, lease_ttl_ms, idempotency_key, secret
    )
    if ctx.will_log("task_claimed"):
        task_id, run = task["id"], lease.run
        ctx.log(
            "task_claimed",
            f"task {task_id} claimed by {agent_id} (attempt {run.attempt})",
            task_id=task_id,
            run_id=run.id,
            role=role,
            agent_id=agent_id,
        )
    return lease


def _handed(
    ctx: Ctx,
    task: Any,
    parsed: Task,
    run_id: str,
    lease_id: str,
    token: str,
    attempt: int,
    agent_id: str,
    role: str,
    expires: int,
) -> Lease:
    """The ``Lease`` of a lease written (its run started at ``ctx.now``): one validation of
    the whole answer, the run's fields in it (the parsed task is taken as it is)."""
    # model_validate, not model_construct: pydantic-core validates a dict in about half the
    # time model_construct's Python code takes (measured: 5.9 vs 12.9 us); and once for the
    # lease and its run, not once each (3.6 -> 2.9 us).
    return Lease.model_validate(
        {
            "task": parsed,
            "run": started_run(run_id, task["id"], attempt, agent_id, role, ctx.now),
            "lease_id": lease_id,
            "lease_token": token,  # pydantic wraps it in SecretStr
            "expires_at_ms": expires,
            "previous_checkpoint": previous_checkpoint(ctx, task),
        }
    )


def lease_all(
    ctx: Ctx,
    picks: Sequence[tuple[Any, Task]],
    agent_id: str,
    role: str,
    lease_ttl_ms: int,
    idempotency_key: str | None,
    secret: bytes | None,
) -> list[Lease]:
    """Lease each picked row (its row, parsed) to ``agent_id``, in order: a new run each, the
    lease on its task row (tokens derived from ``idempotency_key`` with the rail's ``secret``
    when a key is given, else random), the runs and the leases written with one statement
    each for the batch (:meth:`.common.Ctx.many`), the ids made together
    (:func:`fresh_ids_many`). No log line: ``task_claimed`` names the role's depth after each
    lease (:func:`_lease` writes one lease and its line)."""
    now = ctx.now
    expires = now + lease_ttl_ms
    made: list[tuple[Any, Task, str, str, str, int, str]] = []
    runs: list[tuple[Any, ...]] = []
    held: list[tuple[Any, ...]] = []
    ids = fresh_ids_many(now, len(picks), random_tokens=idempotency_key is None)
    if idempotency_key is not None:  # the HMAC keyed once for the batch (a keyed claim)
        assert secret is not None
        tokens = keyed_tokens(secret, [lease_id for _, lease_id, _ in ids], idempotency_key)
        ids = [(r, lease, t) for (r, lease, _), t in zip(ids, tokens, strict=True)]
    for (task, parsed), (run_id, lease_id, token) in zip(picks, ids, strict=True):
        attempt = int(task["last_attempt"]) + 1
        digest = token_hash(token)
        made.append((task, parsed, run_id, lease_id, token, attempt, digest))
        runs.append((run_id, task["id"], attempt, agent_id, role, now))
        held.append((expires, attempt, lease_id, run_id, digest, lease_ttl_ms, task["seq"]))
    ctx.many("claims.add_run", runs)
    ctx.many("claims.lease", held)
    out: list[Lease] = []
    for task, parsed, run_id, lease_id, token, attempt, digest in made:
        hand_out(ctx, run_id, task, digest)  # its plain finish checks this instead of the row
        out.append(
            _handed(ctx, task, parsed, run_id, lease_id, token, attempt, agent_id, role, expires)
        )
    return out


def withdraw(ctx: Ctx, run_id: str, token_sha256: str) -> bool:
    """Undo a lease that was claimed but never handed out (a claim ahead no claim took, on
    the embedded and PostgreSQL rails): the task as if it had not been claimed, its attempt
    count back, and the run no executor saw gone, so the task's next run is the attempt its
    executor expects.
    Only while the lease is still as claimed (its run, token and attempt); False otherwise,
    nothing written (the lease moved on: lapsed, cancelled)."""
    moved = ctx.exec("claims.withdraw_lease", {"run": run_id, "digest": token_sha256})
    if moved.rowcount != 1:
        return False
    ctx.exec("claims.withdraw_run", (run_id,))
    forget(run_id)
    return True


def heartbeat(
    ctx: Ctx,
    lease_id: str,
    run_id: str,
    token_sha256: str,
    lease_ttl_ms: int | None,
    checkpoint: Any = UNSET,
) -> int:
    """Extend a live lease by its own TTL (or ``lease_ttl_ms``); returns the new expiry.

    A ``checkpoint`` given replaces the run's (:func:`.agents.write_checkpoint`) in the same
    write; one over the limit is refused and the lease is not extended.

    ``run_id`` may be empty (NullTickets' heartbeat names only the lease): it is then found
    from ``lease_id``.
    """
    if lease_ttl_ms is not None:
        check_ttl(lease_ttl_ms)
    if not run_id:
        # A plain NullTickets client names only the lease; the partial index on held leases
        # keeps this lookup to the leases currently out.
        run_id = ctx.scalar("claims.run_of_lease", (lease_id,))
        if run_id is None:
            raise LeaseLost(f"lease {lease_id} not found", code="not_found")
    lease = check_lease(ctx, run_id, token_sha256, lease_id=lease_id)
    if checkpoint is not UNSET:
        write_checkpoint(ctx, lease, run_id, checkpoint)
    ttl = lease_ttl_ms if lease_ttl_ms is not None else int(lease["lease_ttl_ms"])
    expires = ctx.now + ttl
    ctx.exec("claims.extend", (expires, lease["seq"]))
    return expires


def reissue(ctx: Ctx, lease_id: str, run_id: str, idempotency_key: str | None) -> Lease:
    """A claim replayed with its idempotency key: the same lease with the same token.

    The token is derived from the key (:mod:`.leasekeys`), so the replay answers what the first
    answer held and whoever holds either keeps the lease. A lease claimed before the rail
    derived tokens (its stored hash is of a random token) gets the derived token instead, and
    the first answer's token stops working, as every replay did then. A lease already gone is
    ``LeaseLost``. Only a keyed claim is replayed (``idempotency_key`` is never None here).
    """
    assert idempotency_key is not None
    task = ctx.one("claims.task_of_run", (run_id,))
    if task is None or task["lease_id"] != lease_id:
        check_lease(ctx, run_id, "", lease_id=lease_id)
    assert task is not None
    if task["lease_expires_at_ms"] <= ctx.now:
        raise LeaseLost(f"lease of run {run_id} expired", code="expired")
    token = keyed_token(rail_key(ctx), lease_id, idempotency_key)
    digest = token_hash(token)
    if task["lease_token_sha256"] != digest:
        ctx.exec("claims.set_token", (digest, task["seq"]))
    run = ctx.one("claims.run", (run_id,))
    assert run is not None
    return Lease(
        task=task_from_row(task),
        run=run_from_row(run),
        lease_id=lease_id,
        lease_token=token,
        expires_at_ms=task["lease_expires_at_ms"],
        previous_checkpoint=previous_checkpoint(ctx, task, before_attempt=run["attempt"]),
    )
