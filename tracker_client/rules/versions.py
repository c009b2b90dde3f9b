"""The version of its pipeline a task is under, and bringing a task to the current one.

A pipeline changes by versions (:mod:`tracker_client.rules.evolve`, docs/operate/pipelines.md).
A task records the version it is under (``tasks.pipeline_version``; NULL: the current one). A
task running while an apply changed its pipeline keeps its version: its transition is judged
against that version's definition (:func:`task_pipeline`), then it lands in the current version,
its target stage taken through the moves of every later version (:func:`landing`). A run that
ended another way (a fail, a lost lease, an older worker's write) leaves the task behind; the
maintenance pass brings it forward (:func:`forward_pending`).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from tracker_client.rules.common import Ctx
from tracker_client.rules.pipelines import PipelineDef

__all__ = ["Landing", "forward", "forward_pending", "landing", "map_stage", "task_pipeline"]

#: Pending forwards a maintenance pass looks at, at most.
FORWARD_BATCH = 100


def map_stage(ctx: Ctx, pid: str, version: int, stage: str) -> str:
    """Where ``stage`` of version ``version`` is in the current version (the moves of every
    later version, in order; a stage no move names stays as it is)."""
    for row in ctx.all("pipelines.moves_after", (pid, version)):
        stage = json.loads(row["moves"]).get(stage, stage)
    return stage


def task_pipeline(ctx: Ctx, task: Any) -> PipelineDef:
    """The definition ``task`` (a ``tasks`` row with ``pipeline_id`` and ``pipeline_version``)
    is judged under: the version it is under, the current one when it names none."""
    version = task["pipeline_version"]
    if version is not None:
        found = ctx.pipelines.at(ctx, task["pipeline_id"], int(version))
        if found is not None:
            return found
    return ctx.pipeline(task["pipeline_id"])


class Landing(NamedTuple):
    """Where a task's move ends in the current version."""

    stage: str
    role: str | None
    terminal: bool
    #: The version to record (None: the task's version is unchanged).
    version: int | None


def landing(ctx: Ctx, task: Any, judged: PipelineDef, to: str) -> Landing:
    """Where a task judged under ``judged`` and moving to its stage ``to`` lands: in the current
    version, ``to`` taken through the moves of every later version. A stage the current version
    lacks (no move named it) keeps the task under its own version."""
    current = ctx.pipeline(task["pipeline_id"])
    if judged.version >= current.version:  # (newer: this process's look is a moment old)
        newest = judged
        under = task["pipeline_version"]  # NULL (an older release's task): the current one
        version = None if under is None or under == newest.version else newest.version
        return Landing(to, newest.role_of(to), newest.is_terminal(to), version)
    mapped = map_stage(ctx, current.id, judged.version, to)
    if mapped not in current.states:
        return Landing(to, judged.role_of(to), judged.is_terminal(to), None)
    return Landing(mapped, current.role_of(mapped), current.is_terminal(mapped), current.version)


def forward(ctx: Ctx, task_id: str) -> bool:
    """Bring a task that is no longer leased to the current version (its stage through the
    moves); True when the pending forward is settled (done, or nothing to do)."""
    row = ctx.one("common.task", (task_id,))
    if row is None:
        return True
    if row["lease_expires_at_ms"] > 0:
        return False
    current = ctx.pipeline(row["pipeline_id"])
    version = row["pipeline_version"]
    if version is None or int(version) >= current.version:
        return True
    stage = map_stage(ctx, current.id, int(version), row["stage"])
    if stage not in current.states:
        return True  # no move names it: it stays under its version (see landing)
    dead_from = row["dead_letter_from_stage"]  # where a requeue brings it back
    if dead_from is not None:
        dead_from = map_stage(ctx, current.id, int(version), dead_from)
    ctx.exec(
        "pipelines.forward_task",
        {
            "dead_from": dead_from,
            "stage": stage,
            "role": current.role_of(stage),
            "terminal": int(current.is_terminal(stage)),
            "version": current.version,
            "seq": row["seq"],
        },
    )
    return True


def forward_pending(ctx: Ctx) -> int:
    """Settle the pending forwards whose lease is gone (a maintenance step); how many."""
    done = 0
    for row in ctx.all("pipelines.forward_rows", (FORWARD_BATCH,)):
        if forward(ctx, str(row["task_id"])):
            ctx.exec("pipelines.forward_done", (row["task_id"],))
            done += 1
    return done
