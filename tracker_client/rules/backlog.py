"""Backlog operations (docs/guarantees/backlog.md): cancel, cancel-all, requeue, requeue-all (one
batch at a time) and the "is it finished?" check behind ``wait``. Runs on the database thread
inside a transaction; touches the tasks and their events only. Imported by the rail's calls that
use it, never by a worker (issue 31; its maintenance pass is :mod:`.maintenance`), so the
operator's answers it builds are imported here once, at the top.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tracker_client.errors import Conflict, NotFound, ValidationFailed
from tracker_client.ops_models import CancelResult, RequeueResult, WaitResult
from tracker_client.rules import budgets
from tracker_client.rules.common import Ctx, artifact_from_row, event_from_row
from tracker_client.rules.pipelines import PipelineDef
from tracker_client.rules.runs import dead_letter
from tracker_client.rules.tasks import get_task
from tracker_client.rules.versions import forward

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "REQUEUE_BATCH",
    "DeadLetters",
    "cancel",
    "cancel_all",
    "count_dead_letters",
    "dead_letters",
    "finished_state",
    "requeue",
    "requeue_batch",
]

Outcome = Literal["done", "dead_lettered", "cancelled", "expired", "pending"]


def _cancel_row(ctx: Ctx, task: sqlite3.Row, reason: str) -> CancelResult:
    run_id = task["lease_run_id"]
    revoked = False
    if run_id is not None:
        revoked = task["lease_expires_at_ms"] > ctx.now
        ctx.exec("backlog.cancel_run", (ctx.now, run_id))
    stage = dead_letter(ctx, task, reason, run_id, kind="cancelled")
    return CancelResult(
        task_id=task["id"], stage=stage, revoked_lease=revoked, dead_letter_reason=reason
    )


def cancel(ctx: Ctx, task_id: str, reason: str) -> CancelResult:
    """Dead-letter a waiting or running task with ``reason``; revoke its lease if running."""
    if not isinstance(reason, str) or not reason:
        raise ValidationFailed("cancel reason must be a non-empty string")
    task = ctx.task_row(task_id)
    if task["dead_letter_reason"] is not None:
        raise Conflict(
            f"task {task_id} is already dead-lettered ({task['dead_letter_reason']})",
            code="already_finished",
        )
    if task["terminal"]:
        raise Conflict(
            f"task {task_id} is already in terminal stage {task['stage']!r}",
            code="already_finished",
        )
    result = _cancel_row(ctx, task, reason)
    descendants = _cancel_descendants(ctx, task, reason)
    if not descendants:
        return result
    return result.model_copy(update={"cancelled_descendants": descendants})


def _cancel_descendants(ctx: Ctx, task: sqlite3.Row, reason: str) -> int:
    """Cancel the unfinished descendants of ``task`` (its subtasks, theirs...; extension
    ``subtasks``) with ``reason``; how many. A rail without the ``parent_id`` column has none."""
    if "parent_id" not in task.keys():  # noqa: SIM118 (a Row: `in` looks at its values)
        return 0
    count = 0
    todo = [task["id"]]
    while todo:
        parent = todo.pop()
        for (child_id,) in ctx.all("backlog.children", (parent,)):
            todo.append(child_id)
            child = ctx.task_row(child_id)  # fresh: a cancel above may have dead-lettered it
            if child["dead_letter_reason"] is None and not child["terminal"]:
                _cancel_row(ctx, child, reason)
                count += 1
    return count


def cancel_all(ctx: Ctx, pipeline_id: str | None, role: str | None) -> int:
    """Cancel every waiting and running task of a pipeline and/or role, and their unfinished
    descendants; returns the count of the tasks matched."""
    if pipeline_id is None and role is None:
        raise ValidationFailed("cancel_all needs a pipeline_id or a role (or both)")
    if pipeline_id is not None:
        rows = ctx.all("backlog.unfinished_of_pipeline", {"pipeline": pipeline_id, "role": role})
    else:
        rows = ctx.all("backlog.unfinished_of_role", (role,))
    for task in rows:
        fresh = ctx.task_row(task["id"])
        if fresh["dead_letter_reason"] is None:  # else: dead-lettered by a cancel above
            _cancel_row(ctx, fresh, "cancelled")
        _cancel_descendants(ctx, fresh, "cancelled")
    return len(rows)


def requeue(ctx: Ctx, task_id: str, stage: str | None, reset_attempts: bool) -> RequeueResult:
    """Bring a dead-lettered task back to ``stage`` (default: where it was)."""
    task = ctx.task_row(task_id)
    if task["dead_letter_reason"] is None:
        raise Conflict(f"task {task_id} is not dead-lettered", code="not_dead_lettered")
    if task["pipeline_version"] is not None and forward(ctx, task_id):  # rules/versions.py
        task = ctx.task_row(task_id)  # under the current version, its stages moved
    return _requeue_row(ctx, task, stage, reset_attempts)


def _check_target(pipeline: PipelineDef, target: str) -> None:
    """``ValidationFailed`` unless ``target`` is a working stage of ``pipeline``."""
    if target not in pipeline.states:
        raise ValidationFailed(
            f"requeue: stage {target!r} is not a state of pipeline {pipeline.name!r} "
            f"(states: {', '.join(pipeline.states)})"
        )
    if pipeline.is_terminal(target):
        # A task requeued into a finished stage would never run: that is not a requeue.
        working = [s for s in pipeline.states if not pipeline.is_terminal(s)]
        raise ValidationFailed(
            f"requeue: stage {target!r} is terminal (finished); requeue into a working stage "
            f"({', '.join(working)})",
            code="terminal_stage",
        )


def _requeue_row(
    ctx: Ctx, task: sqlite3.Row, stage: str | None, reset_attempts: bool
) -> RequeueResult:
    """Requeue one dead-lettered task row: the one write both ``requeue`` and the batches of
    ``requeue_all`` make (stage rules, attempt reset, event, log line)."""
    task_id = task["id"]
    pipeline = ctx.pipeline(task["pipeline_id"])
    target = stage if stage is not None else (task["dead_letter_from_stage"] or task["stage"])
    _check_target(pipeline, target)
    version = int(task["task_version"]) + 1
    # The deadline was for the original wait; a requeued task must not expire again at once.
    ctx.exec(
        "backlog.requeue",
        (
            target,
            version,
            int(reset_attempts),
            pipeline.role_of(target),
            int(pipeline.is_terminal(target)),
            ctx.now,
            task["seq"],
        ),
    )
    budgets.restart(ctx, task["seq"])  # budgets: loops, runs and spend count afresh
    ctx.event(
        task_id,
        None,
        "requeued",
        {
            "previous_reason": task["dead_letter_reason"],
            "from_stage": task["stage"],
            "stage": target,
            "reset_attempts": bool(reset_attempts),
        },
    )
    ctx.log(
        "task_requeued",
        f"task {task_id} requeued to stage {target!r}",
        task_id=task_id,
        role=pipeline.role_of(target),
    )
    return RequeueResult(
        task_id=task_id, stage=target, task_version=version, reset_attempts=bool(reset_attempts)
    )


# -- requeue_all: a pipeline's dead letters, in batches --------------------------------------------
#: Tasks requeued per write transaction by ``requeue_all``: the write lock is held for one batch
#: at a time, so claims and other writers get in between two batches of a long replay.
REQUEUE_BATCH = 200


@dataclass(frozen=True)
class DeadLetters:
    """The dead letters one ``requeue_all`` call takes, fixed (and checked) when it begins.

    Only tasks dead-lettered no later than ``until_ms`` (the call's start; a dead-lettered
    task's ``updated_at_ms`` is when it was dead-lettered: nothing else writes it) and, with a
    ``since_ms``, no earlier than ``until_ms - since_ms``. A task requeued by the call and
    dead-lettered again while it runs is therefore not taken twice: the call is idempotent.
    """

    pipeline_id: str
    reason: str | None
    since_ms: int | None
    stage: str | None
    until_ms: int

    def params(self, after_seq: int = 0) -> dict[str, Any]:
        """The parameters of the statements selecting these tasks after ``after_seq``
        (``backlog.dead_letter_counts``, ``backlog.dead_letter_batch``)."""
        return {
            "pipeline": self.pipeline_id,
            "after": after_seq,
            "until": self.until_ms,
            "reason": self.reason,
            "since": None if self.since_ms is None else self.until_ms - self.since_ms,
        }


def dead_letters(
    ctx: Ctx, pipeline_id: str, reason: str | None, since_ms: int | None, stage: str | None
) -> DeadLetters:
    """Check a ``requeue_all`` call's input (each bad field named, before anything is written)."""
    if not isinstance(pipeline_id, str) or not pipeline_id:
        raise ValidationFailed("requeue_all: pipeline_id must be a non-empty string")
    if reason is not None and (not isinstance(reason, str) or not reason):
        raise ValidationFailed("requeue_all: reason must be a non-empty string (or left out)")
    if since_ms is not None and (
        isinstance(since_ms, bool) or not isinstance(since_ms, int) or since_ms <= 0
    ):
        raise ValidationFailed(
            f"requeue_all: since_ms must be a positive integer, not {since_ms!r}"
        )
    pipeline = ctx.pipelines.get(ctx, pipeline_id)
    if pipeline is None:
        raise NotFound(
            f"requeue_all: pipeline {pipeline_id!r} not found", code="pipeline_not_found"
        )
    if stage is not None:
        _check_target(pipeline, stage)
    return DeadLetters(pipeline_id, reason, since_ms, stage, ctx.now)


def count_dead_letters(ctx: Ctx, chosen: DeadLetters) -> dict[str, int]:
    """How many of the chosen dead letters there are now, by reason (a dry run's answer)."""
    rows = ctx.all("backlog.dead_letter_counts", chosen.params())
    return {str(reason): int(n) for reason, n in rows}


def requeue_batch(
    ctx: Ctx, chosen: DeadLetters, after_seq: int, reset_attempts: bool
) -> tuple[dict[str, int], int | None]:
    """Requeue the next :data:`REQUEUE_BATCH` chosen tasks after ``after_seq``, in seq order.

    Returns what was requeued, by reason, and the seq to continue after (None: none left).
    """
    rows = ctx.all(
        "backlog.dead_letter_batch", {**chosen.params(after_seq), "limit": REQUEUE_BATCH}
    )
    done: dict[str, int] = {}
    for task in rows:
        _requeue_row(ctx, task, chosen.stage, reset_attempts)
        reason = str(task["dead_letter_reason"])
        done[reason] = done.get(reason, 0) + 1
    more = len(rows) == REQUEUE_BATCH
    return done, int(rows[-1]["seq"]) if more else None


def finished_state(ctx: Ctx, task_id: str) -> WaitResult:
    """The task's wait answer now (``finished=False``/``pending`` while it is still going)."""
    detail = get_task(ctx, task_id)
    reason = detail.dead_letter_reason
    outcome: Outcome
    if reason is not None:
        outcome = (
            "cancelled"
            if reason == "cancelled"
            else "expired"
            if reason == "expired"
            else "dead_lettered"
        )
    elif ctx.pipeline(detail.pipeline_id).is_terminal(detail.stage):
        outcome = "done"
    else:
        return WaitResult(finished=False, outcome="pending", task=detail)
    artifacts = [artifact_from_row(r) for r in ctx.all("backlog.artifacts", (task_id,))]
    ev = ctx.one("backlog.last_result", {"task_id": task_id})
    return WaitResult(
        finished=True,
        outcome=outcome,
        task=detail,
        artifacts=artifacts,
        result_event=None if ev is None else event_from_row(ev),
    )
