"""The agent extensions of the embedded tracker: ``checkpoint``, ``list_upstream`` and
``transition_task`` (a human step); their operations are
:class:`~tracker_client.rules.rail.Rail`'s.

The rest of the agent extensions live where the write they extend does: ``parent_id`` in task
creation (:mod:`.tasks`), the cancel cascade (:mod:`.backlog`), ``wait_for`` and the
upstream-failure rule (:mod:`.fanin`, :mod:`.runs`), the heartbeat's checkpoint and the claim's
``previous_checkpoint`` (:mod:`.checkpoints`, :mod:`.claims`).

The functions run on the database thread inside one transaction; they touch tasks, runs, events
and artifacts.
"""

from __future__ import annotations

from typing import Any

from tracker_client.agent_models import UPSTREAM_CANCELLED, Upstream, UpstreamOutcome
from tracker_client.errors import Conflict, InvalidTransition, ValidationFailed
from tracker_client.models import TransitionResult
from tracker_client.rules.common import Ctx, artifact_from_row, stored_json

__all__ = ["list_upstream", "transition_task"]

MAX_INSTRUCTIONS_BYTES = 1024 * 1024


def _outcome(row: Any) -> UpstreamOutcome:
    reason = row["dead_letter_reason"]
    if reason is not None:
        return "cancelled" if reason in ("cancelled", UPSTREAM_CANCELLED) else "dead_lettered"
    return "done" if row["terminal"] else "pending"


def list_upstream(ctx: Ctx, task_id: str) -> list[Upstream]:
    """Each dependency of ``task_id`` in the order it was added (a purged one is left out)."""
    ctx.task_row(task_id)  # NotFound naming it
    rows = ctx.all("agents.upstream", (task_id,))
    out: list[Upstream] = []
    for row in rows:
        uid = row["id"]
        event = ctx.one("agents.last_result", {"task_id": uid})
        artifacts = [artifact_from_row(a) for a in ctx.all("agents.artifacts", (uid,))]
        out.append(
            Upstream(
                task_id=uid,
                title=row["title"],
                stage=row["stage"],
                outcome=_outcome(row),
                result=None
                if event is None
                else stored_json(event["data"], "data", f"event {event['id']}"),
                artifacts=artifacts,
            )
        )
    return out


def _check_args(
    trigger: Any, expected_stage: Any, expected_task_version: Any, instructions: Any
) -> None:
    if not isinstance(trigger, str) or not trigger:
        raise ValidationFailed("transition: trigger must be a non-empty string")
    if not isinstance(expected_stage, str) or not expected_stage:
        raise ValidationFailed(
            "transition: expected_stage must name the stage the task is in (a non-empty string)"
        )
    if expected_task_version is not None and (
        isinstance(expected_task_version, bool) or not isinstance(expected_task_version, int)
    ):
        raise ValidationFailed("transition: expected_task_version must be an integer")
    if instructions is not None and (
        not isinstance(instructions, str) or len(instructions.encode()) > MAX_INSTRUCTIONS_BYTES
    ):
        raise ValidationFailed(
            f"transition: instructions must be a string of at most {MAX_INSTRUCTIONS_BYTES} bytes"
        )


def transition_task(
    ctx: Ctx,
    task_id: str,
    trigger: str,
    expected_stage: str,
    expected_task_version: int | None,
    instructions: str | None,
) -> TransitionResult:
    """Move a task waiting at a human step (a stage with no role, no live lease) along
    ``trigger``; every check comes before any write."""
    _check_args(trigger, expected_stage, expected_task_version, instructions)
    task = ctx.task_row(task_id)
    stage = task["stage"]
    if expected_stage != stage:
        raise Conflict(
            f"task {task_id} is in stage {stage!r}, expected {expected_stage!r}: it moved "
            "meanwhile (read it again)",
            code="expected_stage_mismatch",
        )
    if expected_task_version is not None and expected_task_version != task["task_version"]:
        raise Conflict(
            f"task {task_id} is at version {task['task_version']}, "
            f"expected {expected_task_version}",
            code="task_version_mismatch",
        )
    pipeline = ctx.pipeline(task["pipeline_id"])
    role = pipeline.role_of(stage)
    why = None
    if task["dead_letter_reason"] is not None:
        why = f"it is dead-lettered ({task['dead_letter_reason']}): requeue it instead"
    elif task["terminal"]:
        why = f"stage {stage!r} is terminal: the task is finished"
    elif role is not None:
        why = f"stage {stage!r} has agent_role {role!r}: a worker of that role moves it"
    elif task["lease_expires_at_ms"] > ctx.now:
        why = "it is leased by a worker"
    if why is not None:
        raise Conflict(
            f"task {task_id} is not waiting at a human step: {why}", code="not_a_human_step"
        )
    move = pipeline.find(stage, trigger)
    if move is None:
        allowed = pipeline.triggers_from(stage)
        raise InvalidTransition(
            f"trigger {trigger!r} is not allowed from stage {stage!r}; allowed: "
            + (", ".join(repr(t) for t in allowed) or "none"),
            allowed=allowed,
        )
    to = move.to_state
    ctx.exec(
        "agents.move",
        (to, ctx.now, pipeline.role_of(to), int(pipeline.is_terminal(to)), task["seq"]),
    )
    text = instructions if instructions is not None else (move.instructions or "")
    ctx.event(
        task_id,
        None,
        "transition",
        {"trigger": trigger, "from": stage, "to": to, "instructions": text, "by": "human"},
    )
    ctx.log(
        "task_transitioned",
        f"task {task_id} {stage} -> {to} ({trigger}, by hand)",
        task_id=task_id,
        role=pipeline.role_of(to),
    )
    return TransitionResult(previous_stage=stage, new_stage=to, trigger=trigger)
