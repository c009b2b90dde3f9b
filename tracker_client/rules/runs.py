"""Writes fenced by a lease: events, transition, fail; and dead-lettering, which several share.

Each function runs on the database thread inside one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import hashlib
import hmac
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from tracker_client.agent_models import UPSTREAM_CANCELLED, UPSTREAM_DEAD_LETTERED
from tracker_client.bounds import MAX_DURATION_MS
from tracker_client.errors import (
    Conflict,
    InvalidTransition,
    LeaseLost,
    TrackerError,
    ValidationFailed,
)
from tracker_client.models import DEAD_LETTER_NEVER_MS, FailResult, TransitionResult
from tracker_client.rules import budgets, fanin
from tracker_client.rules.common import MIB, Ctx, dumps
from tracker_client.rules.pipelines import PipelineDef, TransitionDef
from tracker_client.rules.versions import Landing, landing, task_pipeline

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "MAX_HELD",
    "Held",
    "PlainMove",
    "StaleLease",
    "add_event",
    "check_lease",
    "dead_letter",
    "dead_letter_if_upstream_dead",
    "fail",
    "forget",
    "hand_out",
    "plain_move",
    "token_hash",
    "transition",
    "write_moves",
]


def token_hash(token: str) -> str:
    """SHA-256 (hex) of a lease token: the only form of it the database holds."""
    return hashlib.sha256(token.encode()).hexdigest()


def _lost_for_missing(ctx: Ctx, run_id: str) -> LeaseLost:
    status = ctx.scalar("runs.status", (run_id,))
    if status == "cancelled":
        return LeaseLost(
            f"lease of run {run_id} was revoked: the task was cancelled", code="revoked"
        )
    if status == "stale":
        return LeaseLost(f"lease of run {run_id} expired", code="expired")
    return LeaseLost(f"no active lease for run {run_id}", code="not_found")


def check_lease(
    ctx: Ctx, run_id: str, token_sha256: str, *, lease_id: str | None = None
) -> sqlite3.Row:
    """The live lease of ``run_id`` (or ``lease_id``) held by this token, else ``LeaseLost``.

    Returns the task's row with the columns statement ``runs.lease`` reads (the lease lives
    on it: ``lease_id``, ``lease_expires_at_ms``, ...); a write needing more reads the row
    itself.
    """
    row = ctx.one("runs.lease", (run_id,))
    if (
        row is None
        or row["lease_run_id"] != run_id
        or (lease_id is not None and row["lease_id"] != lease_id)
    ):
        raise _lost_for_missing(ctx, run_id)
    if not hmac.compare_digest(row["lease_token_sha256"], token_sha256):
        raise LeaseLost(f"invalid lease token for run {run_id}", code="invalid_token")
    if row["lease_expires_at_ms"] <= ctx.now:
        raise LeaseLost(f"lease of run {run_id} expired", code="expired")
    return row


def add_event(ctx: Ctx, run_id: str, token_sha256: str, kind: str, data: Any) -> int:
    """Append an event to the leased run; returns its id."""
    task = check_lease(ctx, run_id, token_sha256)
    if not isinstance(kind, str) or not kind:
        raise ValidationFailed("event kind must be a non-empty string")
    payload = dumps({} if data is None else data, "event data", max_bytes=MIB)
    cur = ctx.exec("common.add_event", (task["id"], run_id, ctx.now, kind, payload))
    return int(cur.lastrowid or 0)


def _usage(usage: Any) -> str | None:
    return None if usage is None else dumps(usage, "usage", max_bytes=MIB)


def _judged(
    ctx: Ctx,
    run_id: str,
    token_sha256: str,
    trigger: str,
    expected_stage: str | None,
    expected_task_version: int | None,
) -> tuple[sqlite3.Row, PipelineDef, TransitionDef]:
    """A transition's checks, in their order (the lease, the expected stage and version, the
    move): the lease's row, the pipeline version it is judged under and the move; the error
    refusing it otherwise. Reads only."""
    task = check_lease(ctx, run_id, token_sha256)
    stage = task["stage"]
    if expected_stage is not None and expected_stage != stage:
        raise Conflict(
            f"task {task['id']} is in stage {stage!r}, expected {expected_stage!r}",
            code="expected_stage_mismatch",
        )
    if expected_task_version is not None and expected_task_version != task["task_version"]:
        raise Conflict(
            f"task {task['id']} is at version {task['task_version']}, "
            f"expected {expected_task_version}",
            code="task_version_mismatch",
        )
    # Judged against the version it is under (claimed with), then landed in the current one.
    pipeline = task_pipeline(ctx, task)
    move = pipeline.find(stage, trigger)
    if move is None:
        allowed = pipeline.triggers_from(stage)
        raise InvalidTransition(
            f"trigger {trigger!r} is not allowed from stage {stage!r}; allowed: "
            + (", ".join(repr(t) for t in allowed) or "none"),
            allowed=allowed,
        )
    return task, pipeline, move


def transition(
    ctx: Ctx,
    run_id: str,
    token_sha256: str,
    trigger: str,
    expected_stage: str | None,
    expected_task_version: int | None,
    instructions: str | None,
    usage: Any,
    wait_for: Sequence[str] = (),
) -> TransitionResult:
    """Complete the run and move its task along ``trigger``; errors leave everything unchanged.

    ``wait_for`` (extension ``fan_in``): the task then waits for these tasks, the edges added
    here, checked whole first (:func:`.fanin.check_wait_for`). One already dead-lettered never
    resolves: the task is dead-lettered at once (the upstream-failure rule).
    """
    _HELD.pop(run_id, None)  # the run ends here (or stays, refused: read from its row then)
    task, pipeline, move = _judged(
        ctx, run_id, token_sha256, trigger, expected_stage, expected_task_version
    )
    stage = task["stage"]
    usage_text = _usage(usage)
    edges = fanin.check_wait_for(ctx, task["id"], wait_for) if wait_for else []
    now = ctx.now
    lands = landing(ctx, task, pipeline, move.to_state)
    to = lands.stage
    # budgets (docs/operate/budgets.md): a move past one dead-letters the task where it is
    breach = budgets.check_move(ctx, task, pipeline, stage, to, usage)
    if breach is not None:
        ctx.exec("runs.complete", (now, usage_text, run_id))
        return _stop(ctx, task, breach, run_id, stage, trigger, to)
    ctx.exec("runs.complete", (now, usage_text, run_id))
    ctx.exec("runs.move", (to, now, lands.role, int(lands.terminal), task["seq"]))
    if lands.version is not None:
        ctx.exec("pipelines.set_task_version", (lands.version, task["seq"]))
    text = instructions if instructions is not None else (move.instructions or "")
    ctx.event(
        task["id"],
        run_id,
        "transition",
        {"trigger": trigger, "from": stage, "to": to, "instructions": text},
    )
    if ctx.will_log("task_finished"):
        ctx.log(
            "task_finished",
            f"task {task['id']} {stage} -> {to} ({trigger})",
            task_id=task["id"],
            run_id=run_id,
            role=task["role"],
            outcome="transition",
        )
    if edges:
        fanin.add_edges(ctx, task["id"], edges)
        dead_letter_if_upstream_dead(ctx, task["id"])
    return TransitionResult(previous_stage=stage, new_stage=to, trigger=trigger)


class PlainMove(NamedTuple):
    """A plain transition checked and worked out, not written yet (:func:`plain_move`)."""

    run_id: str
    seq: int
    task_id: str
    to: str
    role: str | None
    terminal: int
    #: The pipeline version to record on the task (None: unchanged).
    version: int | None
    usage: str | None
    #: The ``transition`` event's data, as stored.
    event: str
    result: TransitionResult
    #: The lease as this process handed it out, when the move was checked against that
    #: instead of the row: the write then checks the row is still so (:func:`write_moves`).
    held: Held | None = None


class Held(NamedTuple):
    """A lease this process handed out, as its claim left the task's row: what a plain
    transition of its run is checked against instead of reading the row (:func:`plain_move`),
    the move's write checking the row is still so (``runs.move_held``)."""

    #: The connection it was handed out on (the rail: another one's leases are not ours).
    conn: object
    seq: int
    task_id: str
    stage: str
    task_version: int
    pipeline_id: str
    pipeline_version: int | None
    #: The SHA-256 of its token (what the row holds).
    digest: str


#: The leases handed out here and not ended yet, by run id (:func:`hand_out`). An entry lost
#: (the table full, the process restarted) only costs that finish a read of the row.
_HELD: dict[str, Held] = {}
#: The statement that moves a task only while its lease is as handed out.
_MOVE_HELD = "runs.move_held"
#: At most this many are kept (the running runs of this process's rails; entries of runs that
#: ended another way, a release, a lapsed lease, go when it fills).
MAX_HELD = 1024


def hand_out(ctx: Ctx, run_id: str, row: Any, digest: str) -> None:
    """Remember the lease of ``run_id`` on the task ``row`` (its claim's picked row) with the
    token hash ``digest``, for :func:`plain_move`. A task with budgets of its own is not
    remembered (its transition reads and counts them), nor a lease of an engine without the
    guarded move (``runs.move_held``: the SQLite engine's)."""
    if row["budgets"] is not None or _MOVE_HELD not in ctx.sql:
        return
    if len(_HELD) >= MAX_HELD:
        _HELD.clear()
    version = row["pipeline_version"]
    _HELD[run_id] = Held(
        ctx.conn,
        row["seq"],
        row["id"],
        row["stage"],
        int(row["task_version"]),
        row["pipeline_id"],
        None if version is None else int(version),
        digest,
    )


def forget(run_id: str) -> None:
    """Forget the lease of ``run_id`` handed out here (:func:`hand_out`): it ended otherwise."""
    _HELD.pop(run_id, None)


class StaleLease(Exception):
    """A move checked against a lease as handed out found the row changed since (a cancel,
    an expiry, an apply, a replayed claim): nothing of it was written (:func:`write_moves`)."""


def _held_ok(
    held: Held, token_sha256: str, expected_stage: Any, expected_task_version: Any
) -> bool:
    """Whether a transition's own checks pass against the lease as handed out (its token, the
    expected stage and version); False when that cannot tell (the row's read then answers,
    with the error, or finds the lease moved on)."""
    if not hmac.compare_digest(held.digest, token_sha256):
        return False
    if expected_stage is not None and expected_stage != held.stage:
        return False
    return expected_task_version is None or expected_task_version == held.task_version


def _judged_held(
    ctx: Ctx, held: Held, trigger: Any
) -> tuple[dict[str, Any], PipelineDef, TransitionDef] | None:
    """:func:`_judged` against the lease as handed out (no read of the row; its checks passed:
    :func:`_held_ok`), or None when there is no such move (the row's read then answers)."""
    stage = held.stage
    task = {
        "seq": held.seq,
        "id": held.task_id,
        "stage": stage,
        "pipeline_id": held.pipeline_id,
        "pipeline_version": held.pipeline_version,
        "budgets": None,
    }
    pipeline = task_pipeline(ctx, task)
    move = pipeline.find(stage, trigger) if isinstance(trigger, str) else None
    if move is None:
        return None
    return task, pipeline, move


#: A plain move of a held lease worked out for its transaction (:func:`_held_plan`): where it
#: lands (stage, role, terminal, the version to record), its event's data and its answer.
HeldPlan = tuple[str, "str | None", int, "int | None", str, TransitionResult]
#: The memo key of :func:`_held_plan` (:attr:`.common.Ctx.memo`).
_HELD_PLAN = "runs.held_plan"


def _held_plan(ctx: Ctx, held: Held, trigger: str) -> HeldPlan | None:
    """Where a held lease's run moving along ``trigger``, reporting no instructions and no
    usage, lands, its event's data and its answer; None when that move is not plain (no such
    move, a budget to count): the general path then answers it. The same for every run of the
    transaction under the same pipeline version, stage and trigger, so worked out once per
    transaction (the answer is a frozen model, shared by those runs' results)."""
    key = (_HELD_PLAN, held.pipeline_id, held.pipeline_version, held.stage, trigger)
    memo = ctx.memo
    if key in memo:
        found: HeldPlan | None = memo[key]
        return found
    plan: HeldPlan | None = None
    judged = _judged_held(ctx, held, trigger)
    if judged is not None:
        task, pipeline, move = judged
        try:
            lands, data, plain = _plan(ctx, task, pipeline, move)
        except TrackerError:
            plain = False  # transition refuses it, in its own order
        if plain:
            to = lands.stage
            result = TransitionResult(previous_stage=held.stage, new_stage=to, trigger=trigger)
            plan = (to, lands.role, int(lands.terminal), lands.version, data, result)
    memo[key] = plan
    return plan


def plain_move(
    ctx: Ctx,
    run_id: str,
    token_sha256: str,
    trigger: Any,
    expected_stage: Any,
    expected_task_version: Any,
    instructions: Any,
    usage: Any,
) -> PlainMove | None:
    """:func:`transition` of a run whose move needs nothing but its own rows written (no
    ``wait_for``, no budget to count, no log line to queue): checked as :func:`transition`
    checks it (raising its errors) and worked out, but not written (:func:`write_moves`).
    None when :func:`transition` must write it itself (a budget to count, logging on, the
    task's own budgets, a value it would refuse): reads only, so a caller may go on with
    :func:`transition` after None or an error."""
    if ctx.will_log("task_finished"):
        return None  # the line names the role's depth after each move, in order
    held = _HELD.pop(run_id, None)
    judged: tuple[Any, PipelineDef, TransitionDef] | None = None
    if (
        held is not None
        and held.conn is ctx.conn
        and _held_ok(held, token_sha256, expected_stage, expected_task_version)
    ):
        if instructions is None and usage is None and type(trigger) is str:
            plan = _held_plan(ctx, held, trigger)
            if plan is not None:
                to, role, terminal, version, data, result = plan
                return PlainMove(
                    run_id, held.seq, held.task_id, to, role, terminal, version, None, data,
                    result, held,
                )  # fmt: skip
        judged = _judged_held(ctx, held, trigger)
    if judged is None:
        held = None
        judged = _judged(ctx, run_id, token_sha256, trigger, expected_stage, expected_task_version)
    task, pipeline, move = judged
    stage = task["stage"]
    if task["budgets"] is not None:
        return None  # the task's own budgets: transition reads and counts them
    try:
        usage_text = _usage(usage)
        if instructions is None:
            lands, data, plain = _plan(ctx, task, pipeline, move)
        else:
            lands = landing(ctx, task, pipeline, move.to_state)
            data = _event_data(trigger, stage, lands.stage, instructions)
            plain = budgets.one_trip_ok(pipeline, stage, lands.stage, None)
    except TrackerError:
        return None  # transition refuses it, in its own order
    to = lands.stage
    if not (plain if usage is None else budgets.one_trip_ok(pipeline, stage, to, usage)):
        return None  # a budget to check and count (docs/operate/budgets.md)
    return PlainMove(
        run_id,
        task["seq"],
        task["id"],
        to,
        lands.role,
        int(lands.terminal),
        lands.version,
        usage_text,
        data,
        TransitionResult(previous_stage=stage, new_stage=to, trigger=trigger),
        held,
    )


def _event_data(trigger: str, stage: str, to: str, instructions: Any) -> str:
    """The ``transition`` event's data as stored (``transition`` writes the same)."""
    return dumps(
        {"trigger": trigger, "from": stage, "to": to, "instructions": instructions}, "event data"
    )


#: Plain moves worked out (:func:`_plan`), by (the version judged under, the current version,
#: stage, trigger, the task's recorded version): those two versions (kept to check the ids
#: still name them), where the move lands, its event's data, whether no budget needs it.
_PLANS: dict[
    tuple[int, int, str, str, int | None],
    tuple[PipelineDef, PipelineDef, Landing, str, bool],
] = {}


def _plan(
    ctx: Ctx, task: Any, pipeline: PipelineDef, move: TransitionDef
) -> tuple[Landing, str, bool]:
    """A run's move reporting no instructions of its own (nearly every one): where it lands,
    its event's data, whether it needs no budget (usage aside). The same for every run making
    the move from the same version while the current version is the same (both immutable
    once stored), so worked out once and kept."""
    current = ctx.pipeline(task["pipeline_id"])
    stage, under = task["stage"], task["pipeline_version"]
    key = (id(pipeline), id(current), stage, move.trigger, under)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is pipeline and hit[1] is current:
        return hit[2], hit[3], hit[4]
    lands = landing(ctx, task, pipeline, move.to_state)
    data = _event_data(move.trigger, stage, lands.stage, move.instructions or "")
    plain = budgets.one_trip_ok(pipeline, stage, lands.stage, None)
    if len(_PLANS) >= 4096:
        _PLANS.clear()
    _PLANS[key] = (pipeline, current, lands, data, plain)
    return lands, data, plain


def write_moves(ctx: Ctx, moves: Sequence[PlainMove]) -> None:
    """Write moves worked out by :func:`plain_move` (of distinct runs and tasks), each as
    :func:`transition` writes it: the task moved (its version recorded), the run completed,
    the ``transition`` event appended, the events in the moves' order. A move checked against
    its lease as handed out moves the task only if its row is still so (the lease live, held
    by that run and token, the stage, version and pipeline version as handed out, no budgets
    of its own): ``StaleLease`` otherwise, with the moves of the batch written so far (the
    caller rolls them back)."""
    now = ctx.now
    if len(moves) > 1 and all(m.held is not None for m in moves):
        _write_held(ctx, moves, now)
        return
    for m in moves:
        held = m.held
        if held is None:
            ctx.exec("runs.move", (m.to, now, m.role, m.terminal, m.seq))
        else:
            # the move as runs.move's, then the row as handed out (the time twice)
            guard = (m.seq, m.run_id, held.digest, now, held.stage, held.task_version)
            cur = ctx.exec(
                _MOVE_HELD, (m.to, now, m.role, m.terminal, *guard, held.pipeline_version)
            )
            if cur.rowcount != 1:
                raise StaleLease(m.run_id)
        ctx.exec("runs.complete", (now, m.usage, m.run_id))
        if m.version is not None:
            ctx.exec("pipelines.set_task_version", (m.version, m.seq))
        ctx.exec("common.add_event", (m.task_id, m.run_id, now, "transition", m.event))


def _write_held(ctx: Ctx, moves: Sequence[PlainMove], now: int) -> None:
    """:func:`write_moves` of moves all checked against their leases as handed out: each
    statement once for the whole batch (:meth:`.common.Ctx.many`), the guarded moves first;
    ``StaleLease`` when any of them found its row changed."""
    guarded: list[tuple[Any, ...]] = []
    for m in moves:
        held = m.held
        assert held is not None
        guarded.append(
            (m.to, now, m.role, m.terminal, m.seq, m.run_id, held.digest, now, held.stage,
             held.task_version, held.pipeline_version)
        )  # fmt: skip
    if ctx.many(_MOVE_HELD, guarded) != len(moves):
        raise StaleLease(moves[0].run_id)
    ctx.many("runs.complete", [(now, m.usage, m.run_id) for m in moves])
    versions = [(m.version, m.seq) for m in moves if m.version is not None]
    if versions:
        ctx.many("pipelines.set_task_version", versions)
    ctx.many("common.add_event", [(m.task_id, m.run_id, now, "transition", m.event) for m in moves])


def _stop(
    ctx: Ctx,
    task: sqlite3.Row,
    breach: budgets.Breach,
    run_id: str,
    stage: str,
    trigger: str,
    to: str,
) -> TransitionResult:
    """A transition refused by a budget: the task is dead-lettered ``budget_exceeded`` with the
    figures instead of moving (its run completed)."""
    budgets.stopped(ctx, task, breach)
    detail = {**breach.detail(), "trigger": trigger, "to": to}
    fresh = ctx.task_row(task["id"])
    where = dead_letter(ctx, fresh, budgets.REASON, run_id, detail=detail)
    # The answer NullTickets' clients know: the stage the task is in (``get_task`` tells why).
    return TransitionResult(previous_stage=stage, new_stage=where, trigger=trigger)


def retry_delay(row: sqlite3.Row, failed: int, rng: random.Random) -> int:
    """The delay before the next attempt after ``failed`` failures.

    Exponential: ``d = retry_delay_ms * 2**(failed-1)`` capped at ``max_retry_delay_ms``, drawn
    from ``[d/2, d]`` ("equal jitter"): spread out like full jitter, but never near 0, so a
    failing task cannot come back at once however the dice fall.
    """
    # A row stored before the bound (tracker_client.bounds) still fails with a delay in range.
    base = min(max(0, int(row["retry_delay_ms"])), MAX_DURATION_MS)
    if row["backoff"] != "exponential":
        return base
    cap = row["max_retry_delay_ms"]
    exp = base * (2 ** min(max(failed - 1, 0), 62))
    if cap is not None:
        exp = min(exp, max(0, int(cap)))
    exp = min(exp, MAX_DURATION_MS)  # now + the delay stays a date (tracker_client.bounds)
    return rng.randint(exp - exp // 2, exp) if exp > 0 else 0


def fail(
    ctx: Ctx,
    run_id: str,
    token_sha256: str,
    error: str,
    usage: Any,
    rng: random.Random,
    retryable: bool = True,
) -> FailResult:
    """Fail the run; retry later or dead-letter according to the task's policy.

    ``retryable=False`` dead-letters at once with reason ``permanent_failure``.
    """
    _HELD.pop(run_id, None)  # the run ends here (or stays, refused: read from its row then)
    task = check_lease(ctx, run_id, token_sha256)
    if not isinstance(error, str):
        raise ValidationFailed("fail: 'error' must be a string")
    if len(error) > MIB // 4 and len(error.encode()) > MIB:
        raise ValidationFailed(
            f"fail: 'error' is too large ({len(error.encode())} bytes, limit {MIB})"
        )
    usage_text = _usage(usage)
    now = ctx.now
    ctx.exec("runs.fail", (now, error, usage_text, run_id))
    failed = int(task["failed_attempts"]) + 1
    ctx.exec("runs.count_failure", (failed, task["seq"]))
    max_attempts = task["max_attempts"]
    retrying = retryable and (max_attempts is None or failed < max_attempts)
    # budgets (docs/operate/budgets.md): a retry past one dead-letters the task instead
    # (the task's own version: parsed once and kept, so no look at the pipeline's row)
    breach = budgets.check_fail(ctx, task, task_pipeline(ctx, task), usage, retrying)
    if breach is not None:
        budgets.stopped(ctx, task, breach)
        dead_letter(ctx, ctx.task_row(task["id"]), budgets.REASON, run_id, detail=breach.detail())
        return FailResult(
            retry_scheduled=False,
            dead_lettered=True,
            next_eligible_at_ms=DEAD_LETTER_NEVER_MS,
            dead_letter_reason=budgets.REASON,
        )
    if retrying:
        delay = retry_delay(task, failed, rng)
        eligible = now + delay
        ctx.exec("runs.retry_at", (eligible, now, task["seq"]))
        ctx.event(
            task["id"],
            run_id,
            "retry_scheduled",
            {
                "reason": "retry_scheduled",
                "failed_attempts": failed,
                "retry_delay_ms": delay,
                "next_eligible_at_ms": eligible,
            },
        )
        if ctx.will_log("task_finished"):
            ctx.log(
                "task_finished",
                f"task {task['id']} failed (attempt {failed}), retry at {eligible}",
                task_id=task["id"],
                run_id=run_id,
                role=task["role"],
                outcome="retry_scheduled",
            )
        return FailResult(retry_scheduled=True, dead_lettered=False, next_eligible_at_ms=eligible)
    fresh = ctx.task_row(task["id"])
    reason = "max_attempts_exceeded" if retryable else "permanent_failure"
    dead_letter(ctx, fresh, reason, run_id)
    return FailResult(
        retry_scheduled=False,
        dead_lettered=True,
        next_eligible_at_ms=DEAD_LETTER_NEVER_MS,
        dead_letter_reason=reason,
    )


def dead_letter(
    ctx: Ctx,
    task: Any,
    reason: str,
    run_id: str | None,
    *,
    kind: str = "dead_letter",
    upstream: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> str:
    """Make the task unclaimable until requeued, in its dead-letter stage; returns the stage.
    ``detail``: more for its event's data (a crash loop's count and limit).

    Its waiting dependents follow, down the graph, in the same write (:func:`_propagate`):
    a dead-lettered or cancelled dependency never resolves.
    """
    stage = _dead_letter_one(ctx, task, reason, run_id, kind, upstream, detail)
    _propagate(ctx, task["id"], kind == "cancelled" or reason == UPSTREAM_CANCELLED)
    return stage


def dead_letter_if_upstream_dead(ctx: Ctx, task_id: str) -> bool:
    """Dead-letter ``task_id`` at once when one of its dependencies is already dead-lettered or
    cancelled (it never resolves: the upstream-failure rule, docs/guarantees/edge-cases.md),
    with reason ``upstream_dead_lettered`` / ``upstream_cancelled`` naming that upstream; a
    leased task loses its lease as a dependent reached by propagation does. Called after a
    write adds edges (create with ``dependencies``, ``add_dependency``, a transition's
    ``wait_for``), so such a task never waits forever. True when it was dead-lettered; a
    finished or already dead-lettered task is left as it is."""
    dead = fanin.dead_upstream(ctx, task_id)
    if dead is None:
        return False
    row = ctx.task_row(task_id)
    if row["dead_letter_reason"] is not None or row["terminal"]:
        return False
    run_id = row["lease_run_id"]
    if run_id is not None:
        ctx.exec("runs.cancel", (ctx.now, run_id))
    dead_letter(ctx, row, fanin.upstream_reason(dead), run_id, upstream=dead["id"])
    return True


def _propagate(ctx: Ctx, root: str, cancelled: bool) -> None:
    """Dead-letter every unfinished task that waits (transitively) on ``root``, with reason
    ``upstream_cancelled`` (the chain began with a cancel) or ``upstream_dead_lettered``; a
    leased one loses its lease (its run ends ``cancelled``, as a cancel ends it)."""
    reason = UPSTREAM_CANCELLED if cancelled else UPSTREAM_DEAD_LETTERED
    todo = [root]
    while todo:
        upstream = todo.pop()
        for row in fanin.waiting_on(ctx, upstream):
            run_id = row["lease_run_id"]
            if run_id is not None:
                ctx.exec("runs.cancel", (ctx.now, run_id))
            _dead_letter_one(ctx, row, reason, run_id, "dead_letter", upstream)
            todo.append(row["id"])


def _dead_letter_one(
    ctx: Ctx,
    task: sqlite3.Row,
    reason: str,
    run_id: str | None,
    kind: str,
    upstream: str | None,
    detail: Mapping[str, Any] | None = None,
) -> str:
    pipeline = ctx.pipeline(task["pipeline_id"])
    from_stage = task["stage"]
    dls = task["dead_letter_stage"]
    moved = dls is not None and dls in pipeline.states and dls != from_stage
    to = dls if moved else from_stage
    ctx.exec(
        "runs.dead_letter",
        (
            reason,
            DEAD_LETTER_NEVER_MS,
            from_stage,
            to,
            pipeline.role_of(to),
            int(pipeline.is_terminal(to)),
            1 if moved else 0,
            ctx.now,
            task["seq"],
        ),
    )
    ctx.event(
        task["id"],
        run_id,
        kind,
        {
            "reason": reason,
            "failed_attempts": int(task["failed_attempts"]),
            "from_stage": from_stage,
            "dead_letter_stage": dls if dls in pipeline.states else None,
            **({} if upstream is None else {"upstream_task_id": upstream}),
            **(detail or {}),
        },
    )
    ctx.log(
        "task_cancelled" if kind == "cancelled" else "task_dead_lettered",
        f"task {task['id']} dead-lettered ({reason}) from stage {from_stage!r}",
        task_id=task["id"],
        run_id=run_id,
        role=pipeline.role_of(from_stage),
        reason=reason,
    )
    return str(to)
