"""Retention: purging finished tasks older than an age, in small batches, and shrinking the file.

A task is purgeable when it is finished (terminal, dead-lettered, cancelled), holds no live
lease, was last updated before the cutoff, and no unfinished task depends on it (a dependency on
a dead-lettered task blocks its dependent; deleting it would unblock it). With the task go its
runs, events, artifact records, dependency and assignment rows, and its OTLP spans. Spans linked
to no task of the rail, and OTLP blobs, go once received before the cutoff (a purge of every
pipeline only, as idempotency records).

Candidates are found in a read (no write lock, along the ``tasks_order`` index: a task updated
before the cutoff was created before it) and deleted by id in write transactions of at most
:data:`ROW_BUDGET` event rows and :data:`BATCH_TASKS` tasks, each re-checking every condition, so
a task claimed or requeued in between is left alone and no write lock is held for long.
Afterwards ``PRAGMA incremental_vacuum`` gives freed pages back to the file system in steps of
:data:`VACUUM_STEP` pages (a no-op on a file without ``auto_vacuum = INCREMENTAL``, see
:mod:`.migrate`).

This room touches the tables of tasks and what hangs off them, ``idempotency`` and the span
tables (``spans``, ``span_batches``); it is driven
by :class:`~tracker_client.rules.rail.Rail` (``maintenance`` and ``purge``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from tracker_client.errors import ValidationFailed
from tracker_client.rules.common import Ctx

if TYPE_CHECKING:
    from tracker_client.maintenance_models import PurgeResult

__all__ = [
    "BATCH_TASKS",
    "MAX_AGE_MS",
    "ROW_BUDGET",
    "VACUUM_STEP",
    "Batch",
    "check_age",
    "purge",
]

Runner = Callable[[str, Callable[[Ctx], Any]], Awaitable[Any]]

#: Tasks examined (and at most deleted) per transaction.
BATCH_TASKS = 50
#: Event rows deleted per transaction at most (a task with a long log takes several).
ROW_BUDGET = 500
#: Pages given back per ``incremental_vacuum`` transaction.
VACUUM_STEP = 1000
#: The largest age accepted: 100 years (more is a typo, not a policy).
MAX_AGE_MS = 100 * 366 * 86_400_000


def check_age(older_than_ms: object) -> int:
    """``older_than_ms`` as a positive integer of at most :data:`MAX_AGE_MS`, else
    ``ValidationFailed`` naming it (a zero age would purge what just finished)."""
    if isinstance(older_than_ms, bool) or not isinstance(older_than_ms, int):
        raise ValidationFailed(f"older_than_ms: expected an integer, got {older_than_ms!r}")
    if older_than_ms <= 0:
        raise ValidationFailed(f"older_than_ms: must be > 0, got {older_than_ms}")
    if older_than_ms > MAX_AGE_MS:
        raise ValidationFailed(
            f"older_than_ms: at most {MAX_AGE_MS} (100 years), got {older_than_ms}"
        )
    return older_than_ms


@dataclass
class Batch:
    """Rows one step deleted (or would delete); ``done``: the step's tasks are all gone."""

    tasks: int = 0
    runs: int = 0
    events: int = 0
    artifacts: int = 0
    done: bool = True


def _ids(ids: Sequence[str]) -> str:
    """An id list as the one JSON array parameter the statements take."""
    return json.dumps(list(ids))


def _candidates(
    ctx: Ctx, cutoff: int, pipeline: str | None, after: tuple[int, int]
) -> tuple[list[str], tuple[int, int]]:
    rows = ctx.all(
        "retention.candidates",
        {
            "cutoff": cutoff,
            "now": ctx.now,
            "pipeline": pipeline,
            "after_ms": after[0],
            "after_seq": after[1],
            "limit": BATCH_TASKS,
        },
    )
    if not rows:
        return [], after
    return [str(r[0]) for r in rows], (int(rows[-1][1]), int(rows[-1][2]))


def _still_purgeable(ctx: Ctx, ids: Sequence[str], cutoff: int, pipeline: str | None) -> list[str]:
    params = {"ids": _ids(ids), "now": ctx.now, "cutoff": cutoff, "pipeline": pipeline}
    return [str(r[0]) for r in ctx.all("retention.still_purgeable", params)]


def _count(ctx: Ctx, ids: Sequence[str]) -> Batch:
    listed = _ids(ids)
    runs = ctx.scalar("retention.count_runs", (listed,))
    events = ctx.scalar("retention.count_events", (listed,))
    artifacts = ctx.scalar("retention.count_artifacts", {"ids": listed})
    return Batch(len(ids), int(runs), int(events), int(artifacts))


def _delete(ctx: Ctx, ids: Sequence[str], cutoff: int, pipeline: str | None) -> Batch:
    """One write step: re-check ``ids``, delete up to :data:`ROW_BUDGET` of their events, and,
    when none are left, the tasks with everything else of theirs."""
    live = _still_purgeable(ctx, ids, cutoff, pipeline)
    if not live:
        return Batch()
    listed = _ids(live)
    spans = ctx.exec("retention.delete_spans", {"ids": listed, "limit": ROW_BUDGET}).rowcount
    if spans >= ROW_BUDGET:
        return Batch(done=False)
    budget = ROW_BUDGET - spans
    events = ctx.exec("retention.delete_events", {"ids": listed, "limit": budget}).rowcount
    if events >= budget:
        return Batch(events=events, done=False)
    artifacts = ctx.exec("retention.delete_artifacts", {"ids": listed}).rowcount
    runs = ctx.exec("retention.delete_runs", (listed,)).rowcount
    ctx.exec("retention.delete_dependencies", {"ids": listed})
    ctx.exec("retention.delete_assignments", (listed,))
    tasks = ctx.exec("retention.delete_tasks", (listed,)).rowcount
    return Batch(tasks, runs, events, artifacts)


def _drop_keys(ctx: Ctx, cutoff: int) -> int:
    """Idempotency records older than the cutoff (a write that old cannot be replayed)."""
    return int(ctx.exec("retention.drop_keys", (cutoff, ROW_BUDGET)).rowcount)


def _drop_spans(ctx: Ctx, cutoff: int) -> int:
    """Old spans of no task and old blobs and emptied batches, at most :data:`ROW_BUDGET`."""
    spans = int(ctx.exec("retention.unlinked_spans", (cutoff, ROW_BUDGET)).rowcount)
    if spans >= ROW_BUDGET:
        return spans
    return spans + int(ctx.exec("retention.empty_batches", (cutoff, ROW_BUDGET - spans)).rowcount)


def _vacuum_step(ctx: Ctx) -> int:
    """Give back up to :data:`VACUUM_STEP` free pages; 0 without incremental auto-vacuum.

    The statements are SQLite's own (``retention.vacuum_page`` and its checks, marked ``only:
    sqlite``): an engine without them (PostgreSQL, whose autovacuum gives space back by
    itself) has no file to shrink here. Python's ``execute`` steps a statement once, and each
    step of ``incremental_vacuum`` frees one page, so it is stepped page by page (about 10 us
    each).
    """
    if "retention.vacuum_page" not in ctx.sql:
        return 0
    if int(ctx.scalar("retention.auto_vacuum")) != 2:
        return 0
    n = min(int(ctx.scalar("retention.free_pages")), VACUUM_STEP)
    for _ in range(n):
        ctx.exec("retention.vacuum_page")
    return n


async def purge(
    read: Runner,
    write: Runner,
    *,
    cutoff_ms: int,
    pipeline_id: str | None = None,
    dry_run: bool = False,
    max_batches: int | None = None,
) -> PurgeResult:
    """Purge (or, with ``dry_run``, count) the purgeable tasks updated before ``cutoff_ms``.

    ``read``/``write`` run one function of a :class:`Ctx` in a read / write transaction (the
    tracker's ``_read``/``_write``). ``max_batches`` bounds the work of one maintenance pass
    (the next pass goes on). Idempotency records before the cutoff go too, unless the purge is
    limited to one pipeline (a record names no pipeline).
    """
    from tracker_client.maintenance_models import PurgeResult  # a purge's answer (issue 31)

    total = Batch()
    after = (-(2**62), -1)
    batches = 0
    while max_batches is None or batches < max_batches:
        batches += 1
        ids, after = await read(
            "purge", partial(_candidates, cutoff=cutoff_ms, pipeline=pipeline_id, after=after)
        )
        if not ids:
            break
        if dry_run:
            step = await read("purge", partial(_count, ids=ids))
            _add(total, step)
            continue
        while True:
            step = await write(
                "purge", partial(_delete, ids=ids, cutoff=cutoff_ms, pipeline=pipeline_id)
            )
            _add(total, step)
            if step.done:
                break
    keys = pages = 0
    if not dry_run:
        spans = 0
        if pipeline_id is None:
            while (n := await write("purge", lambda c: _drop_keys(c, cutoff_ms))) > 0:
                keys += n
            while (n := await write("purge", lambda c: _drop_spans(c, cutoff_ms))) > 0:
                spans += n
        if total.tasks or keys or spans:
            while (n := await write("vacuum", _vacuum_step)) > 0:
                pages += n
    return PurgeResult(
        tasks=total.tasks,
        runs=total.runs,
        events=total.events,
        artifacts=total.artifacts,
        idempotency_keys=keys,
        pages_freed=pages,
        cutoff_ms=cutoff_ms,
        dry_run=dry_run,
    )


def _add(total: Batch, step: Batch) -> None:
    total.tasks += step.tasks
    total.runs += step.runs
    total.events += step.events
    total.artifacts += step.artifacts
