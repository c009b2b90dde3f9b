"""A task's state as operators see it (waiting, running, failed, dead, done): one rule for every
front end (``task list --state``, the dashboard's filter).

The stage census of a rail says where tasks are; this says what they are doing, from the task
itself, its stage's definition in its pipeline, and (for an open task) its latest run. Pure
functions over the models: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from tracker_client.models import Pipeline, Task, TaskDetail

__all__ = [
    "STATES",
    "coarse_state",
    "dead_letter_note",
    "stage_definition",
    "state_of",
    "task_state",
]

#: Every state, with what it means; every task is in exactly one.
STATES: Mapping[str, str] = {
    "waiting": "open and not running: never run yet, or moved here by a transition "
    "(incl. blocked on dependencies, assigned, or scheduled for later)",
    "running": "its latest run holds a lease",
    "failed": "open and not running, its latest run failed or lost its lease: to be retried",
    "dead": "dead-lettered: out of retries, cancelled, expired or crash-looping",
    "done": "in a terminal stage",
}


def stage_definition(pipeline: Pipeline | None, stage: str) -> Mapping[str, object]:
    """The definition of ``stage`` in ``pipeline`` (empty when either is unknown)."""
    if pipeline is None:
        return {}
    states = pipeline.definition.get("states") or {}
    found = states.get(stage) if isinstance(states, dict) else None
    return found if isinstance(found, dict) else {}


def coarse_state(task: Task, stage: Mapping[str, object]) -> str | None:
    """``dead`` or ``done`` when the listed task alone says so; None when the state needs the
    task's latest run (``stage``: its stage's definition)."""
    if task.dead_letter_reason:
        return "dead"
    if stage.get("terminal"):
        return "done"
    return None


def task_state(task: Task, stage: Mapping[str, object], detail: TaskDetail | None) -> str:
    """One of :data:`STATES` (``detail``, the task read whole, is needed for an open task)."""
    run = detail.latest_run if detail is not None else None
    return state_of(task, stage, run.status if run is not None else None)


def state_of(task: Task, stage: Mapping[str, object], run_status: str | None) -> str:
    """One of :data:`STATES`, from the task and its latest run's status (None: never claimed),
    as a listing with extension ``list_state`` carries it (``Task.listed``)."""
    coarse = coarse_state(task, stage)
    if coarse is not None:
        return coarse
    if run_status == "running":
        return "running"
    if run_status in ("failed", "stale"):
        return "failed"
    return "waiting"


def dead_letter_note(task: Task) -> str | None:
    """Why a dead-lettered task is dead, where a reason has a knob to name: a ``crash_loop``
    (its lease expired ``max_stale_attempts`` times in a row; see
    docs/guarantees/edge-cases.md), or a ``budget_exceeded`` (the budget's figures, read on a
    :class:`TaskDetail`: docs/operate/budgets.md). None for other tasks and reasons (the reason
    says it)."""
    if task.dead_letter_reason == "budget_exceeded":
        budget = task.budget if isinstance(task, TaskDetail) else None
        if budget is None or budget.exceeded is None:
            return None
        return f"{budget.exceeded}; `task requeue` counts loops, runs and spend afresh"
    if task.dead_letter_reason != "crash_loop":
        return None
    count = task.stale_streak
    if task.max_stale_attempts is not None:
        knob = f"the task's max_stale_attempts = {task.max_stale_attempts}"
    else:
        knob = "the rail's max_stale_attempts option (default 3)"
    runs = f"{count} time{'' if count == 1 else 's'}" if count else "repeatedly"
    return (
        f"its lease expired {runs} in a row (its worker was killed or lost the rail while "
        f"running it); the limit is {knob}; `task requeue` starts the count again"
    )
