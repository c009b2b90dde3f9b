"""Pipelines and tasks: create (single and bulk, with the backlog cap), read, dependencies,
assignments. Runs on the database thread inside a transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tracker_client.bounds import MAX_DURATION_MS, MAX_EPOCH_MS, MAX_TITLE_CHARS
from tracker_client.errors import BacklogFull, Conflict, NotFound, ValidationFailed
from tracker_client.models import ListedRun, ListedState, Pipeline, Run, Task
from tracker_client.rules import budgets
from tracker_client.rules.common import (
    INT64_MAX,
    INT64_MIN,
    MIB,
    Ctx,
    check_limit,
    dependencies_of,
    dumps,
    list_assignments,
    new_id,
    run_from_row,
    task_from_row,
)
from tracker_client.rules.createopts import dedupe_hit, dedupe_of, run_at_of
from tracker_client.rules.pipelines import PipelineDef, validate_definition
from tracker_client.rules.retrypolicy import given_retry
from tracker_client.rules.runs import dead_letter_if_upstream_dead
from tracker_client.rules.versions import task_pipeline

if TYPE_CHECKING:
    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import Page, TaskCreate, TaskDetail

T = TypeVar("T")

__all__ = [
    "backlog_full",
    "create_pipeline",
    "create_tasks",
    "get_task",
    "list_pipelines",
    "list_runs",
    "list_tasks",
    "page_by_creation",
    "parse_created_cursor",
]


# -- pipelines ------------------------------------------------------------------------------------
def create_pipeline(ctx: Ctx, name: str, definition: Mapping[str, Any]) -> str:
    """Validate and store a pipeline; returns its id."""
    if not isinstance(name, str) or not name:
        raise ValidationFailed("pipeline name must be a non-empty string")
    parsed = validate_definition(definition)
    if ctx.one("tasks.pipeline_named", (name,)) is not None:
        raise Conflict(f"a pipeline named {name!r} already exists", code="duplicate_name")
    pid = new_id()
    ctx.exec(
        "tasks.add_pipeline",
        (pid, name, dumps(parsed.definition, "pipeline definition"), ctx.now),
    )
    return pid


def list_pipelines(ctx: Ctx) -> list[Pipeline]:
    """All pipelines, newest first."""
    return [p.model() for p in reversed(ctx.pipelines.all(ctx))]


# -- task creation --------------------------------------------------------------------------------
def _int(value: Any, what: str, *, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationFailed(f"{what} must be an integer {low}..{high}, got {value!r}")
    return value


def _json_type(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def _prepare(ctx: Ctx, spec: TaskCreate, index: int | None) -> tuple[dict[str, Any], PipelineDef]:
    """Validate one task; returns its column values and its pipeline."""
    at = "" if index is None else f"task #{index + 1}: "
    pipeline = ctx.pipelines.recent(ctx, spec.pipeline_id, ctx.now)
    if pipeline is None:
        raise NotFound(f"{at}pipeline {spec.pipeline_id} not found", code="pipeline_not_found")
    if not isinstance(spec.title, str) or len(spec.title) > MAX_TITLE_CHARS:
        raise ValidationFailed(
            f"{at}title must be a string of at most {MAX_TITLE_CHARS} characters"
        )
    if not isinstance(spec.description, str) or len(spec.description.encode()) > MIB:
        raise ValidationFailed(f"{at}description must be a string of at most {MIB} bytes")
    priority = _int(spec.priority, f"{at}priority")
    if not isinstance(spec.metadata, dict):
        # Executors and the worker read keys of it (timeout_s...): a string or list has none.
        raise ValidationFailed(
            f"{at}metadata must be a JSON object, got {_json_type(spec.metadata)}",
            code="invalid_metadata",
        )
    metadata = dumps(spec.metadata, f"{at}metadata", max_bytes=MIB)
    resolved = ctx.opts.retry.merged(pipeline.retry).merged(given_retry(spec.retry_policy))
    max_attempts = resolved.max_attempts
    if max_attempts is not None:
        _int(max_attempts, f"{at}retry_policy.max_attempts", low=0)
    # Durations and times are bounded (tracker_client.bounds): now plus any of them must stay
    # a 64-bit number and a date, or the task's fail/expiry arithmetic overflows.
    retry_delay = _int(
        resolved.retry_delay_ms, f"{at}retry_policy.retry_delay_ms", low=0, high=MAX_DURATION_MS
    )
    backoff = resolved.backoff
    max_delay = resolved.max_retry_delay_ms
    if max_delay is not None:
        _int(max_delay, f"{at}retry_policy.max_retry_delay_ms", low=0, high=MAX_DURATION_MS)
    dls = resolved.dead_letter_stage
    if dls is not None and dls not in pipeline.states:
        raise ValidationFailed(
            f"{at}retry_policy.dead_letter_stage {dls!r} is not a state of pipeline "
            f"{pipeline.name!r} (states: {', '.join(pipeline.states)})"
        )
    deps = list(spec.dependencies or [])
    if len(set(deps)) != len(deps):
        dup = next(d for d in deps if deps.count(d) > 1)
        raise Conflict(f"{at}dependency {dup} is listed twice", code="duplicate_dependency")
    for dep in deps:
        if ctx.one("tasks.exists", (dep,)) is None:
            raise NotFound(f"{at}dependency task {dep} not found", code="task_not_found")
    if spec.assigned_agent_id is not None and (
        not isinstance(spec.assigned_agent_id, str) or not spec.assigned_agent_id
    ):
        raise ValidationFailed(f"{at}assigned_agent_id must be a non-empty string")
    if spec.concurrency_key is not None and (
        not isinstance(spec.concurrency_key, str) or not spec.concurrency_key
    ):
        raise ValidationFailed(f"{at}concurrency_key must be a non-empty string")
    if spec.max_stale_attempts is not None:
        _int(spec.max_stale_attempts, f"{at}max_stale_attempts", low=0)
    expires = spec.expires_at_ms
    if expires is not None:
        _int(expires, f"{at}expires_at_ms", low=0, high=MAX_EPOCH_MS)
    elif spec.queue_ttl_ms is not None:
        expires = ctx.now + _int(
            spec.queue_ttl_ms, f"{at}queue_ttl_ms", low=1, high=MAX_DURATION_MS
        )
    elif pipeline.default_queue_ttl_ms is not None:
        expires = ctx.now + pipeline.default_queue_ttl_ms
    run_at = run_at_of(ctx, spec, at)
    if run_at is not None and expires is not None and expires <= run_at:
        raise ValidationFailed(
            f"{at}the task would expire (expires_at_ms {expires}) before it is due "
            f"(run_at_ms {run_at}): it could never run"
        )
    dedupe_key, dedupe_window = dedupe_of(spec, at)
    parent = spec.parent_id
    if parent is not None and (
        not isinstance(parent, str) or ctx.one("tasks.exists", (parent,)) is None
    ):
        raise NotFound(f"{at}parent task {parent} not found", code="parent_not_found")
    initial = pipeline.initial
    values: dict[str, Any] = {
        "id": new_id(),
        "pipeline_id": pipeline.id,
        "stage": initial,
        "title": spec.title,
        "description": spec.description,
        "priority": priority,
        "metadata": metadata,
        "retry_delay_ms": retry_delay,
        "max_attempts": max_attempts,
        "dead_letter_stage": dls,
        "backoff": backoff,
        "max_retry_delay_ms": max_delay,
        "created_at_ms": ctx.now,
        "updated_at_ms": ctx.now,
        "concurrency_key": spec.concurrency_key,
        "expires_at_ms": expires,
        "max_stale_attempts": spec.max_stale_attempts,
        "role": pipeline.role_of(initial),
        "terminal": int(pipeline.is_terminal(initial)),
        "has_deps": int(bool(deps)),
        "assignee": spec.assigned_agent_id,
        # A delayed task: the claim scan skips it until next_eligible_at_ms (a past run_at
        # is due now); run_at_ms keeps the scheduled time for `queue` and `task show`.
        "next_eligible_at_ms": run_at if run_at is not None and run_at > ctx.now else 0,
        "run_at_ms": run_at,
        "dedupe_key": dedupe_key,
        "dedupe_window_ms": dedupe_window,
        # The version of its pipeline it enters under (docs/operate/pipelines.md).
        "pipeline_version": pipeline.version,
    }
    values["_deps"] = deps
    values["_parent"] = parent
    values["_assigned_by"] = spec.assigned_by
    values["_budgets"] = (  # budgets (docs/operate/budgets.md), checked here
        None if spec.budgets is None else budgets.parse_limits(spec.budgets, f"{at}budgets")
    )
    return values, pipeline


#: The columns statement ``tasks.insert`` binds, in its order.
_KEYS = (
    "id",
    "pipeline_id",
    "stage",
    "title",
    "description",
    "priority",
    "metadata",
    "retry_delay_ms",
    "max_attempts",
    "dead_letter_stage",
    "backoff",
    "max_retry_delay_ms",
    "created_at_ms",
    "updated_at_ms",
    "concurrency_key",
    "expires_at_ms",
    "max_stale_attempts",
    "role",
    "terminal",
    "has_deps",
    "assignee",
    "next_eligible_at_ms",
    "run_at_ms",
    "dedupe_key",
    "dedupe_window_ms",
    "pipeline_version",
)


def _deduped(ctx: Ctx, prepared: list[tuple[dict[str, Any], PipelineDef]]) -> list[str | None]:
    """Per item, the id of the task it dedupes to (an existing one, or an earlier item of the
    same batch), or None when it is to be created."""
    out: list[str | None] = []
    batch: dict[str, str] = {}
    for values, _p in prepared:
        key = values["dedupe_key"]
        hit = None if key is None else batch.get(key) or dedupe_hit(ctx, key)
        if key is not None and hit is None:
            batch[key] = values["id"]
        out.append(hit)
    return out


def backlog_full(role: str, depth: int, cap: int) -> BacklogFull:
    """The refusal of a create that would pass ``role``'s backlog cap (``depth`` waiting now)."""
    return BacklogFull(
        f"backlog of role {role!r} is full: {depth} waiting, cap {cap}",
        role=role,
        depth=depth,
        cap=cap,
    )


def create_tasks(ctx: Ctx, specs: Sequence[TaskCreate], *, bulk: bool) -> list[str]:
    """Create tasks all-or-nothing; ``BacklogFull`` when a role's cap would be passed.

    An item whose ``dedupe_key`` is held (:mod:`.createopts`) is not created: its place in the
    answer holds the existing task's id.
    """
    if not specs:
        raise ValidationFailed("bulk create needs at least one task", code="invalid_request")
    checked = [_prepare(ctx, spec, i if bulk else None) for i, spec in enumerate(specs)]
    hits = _deduped(ctx, checked)
    prepared = [item for item, hit in zip(checked, hits, strict=True) if hit is None]
    adding: dict[str, int] = {}
    for values, _p in prepared:
        if values["role"] is not None and not values["terminal"]:
            adding[values["role"]] = adding.get(values["role"], 0) + 1
    for role, n in adding.items():
        cap = ctx.opts.cap_for(role)
        if cap <= 0:
            continue
        # A row only when adding n would pass the cap (its exact depth). On PostgreSQL the
        # server decides, with the insert's round trip (schema 18): no row here, BacklogFull
        # from the commit (see backlog_full).
        full = ctx.one("tasks_cap.check", {"role": role, "now": ctx.now, "n": n, "cap": cap})
        if full is not None:
            raise backlog_full(role, int(full[0]), cap)
    ids: list[str] = []
    for values, _p in prepared:
        ctx.exec("tasks.insert", tuple(values[k] for k in _KEYS))
        tid = values["id"]
        if values["_parent"] is not None:  # extension subtasks (a column of schema 7)
            ctx.exec("tasks.set_parent", (values["_parent"], tid))
        for dep in values["_deps"]:
            ctx.exec("tasks.add_dependency", (tid, dep, ctx.now))
        budgets.store_task_limits(ctx, tid, values["_budgets"])
        if values["_deps"]:
            dead_letter_if_upstream_dead(ctx, tid)  # a dead upstream never resolves
        if values["assignee"] is not None:
            ctx.exec(
                "tasks.add_assignment",
                (tid, values["assignee"], values["_assigned_by"], ctx.now, ctx.now),
            )
        ids.append(tid)
    created = iter(ids)
    answer = [hit if hit is not None else next(created) for hit in hits]
    if len(answer) > len(ids):
        ctx.log(
            "task_deduped",
            f"{len(answer) - len(ids)} create(s) answered an existing task by dedupe key",
            task_id=next(h for h in hits if h is not None),
            count=len(answer) - len(ids),
        )
    if prepared:
        first = prepared[0][0]
        ctx.log(
            "task_created",
            f"created {len(ids)} task(s), first {first['id']}"
            if bulk
            else f"created task {first['id']}",
            task_id=first["id"],
            role=first["role"],
            count=len(ids),
        )
    return answer


# -- task reads -----------------------------------------------------------------------------------
def parse_created_cursor(ctx: Ctx, cursor: str, seq_of: str) -> tuple[int, int]:
    """``"<created_at_ms>:<id>"`` -> (created_at_ms, seq); ``invalid_cursor`` if malformed.

    ``seq_of``: the statement answering the listed table's ``seq`` of an id."""
    ms_text, sep, ident = cursor.partition(":") if isinstance(cursor, str) else ("", "", "")
    try:
        ms: int | None = int(ms_text)
    except ValueError:
        ms = None
    if ms is not None and not INT64_MIN <= ms <= INT64_MAX:
        ms = None
    row = ctx.one(seq_of, (ident,)) if sep and ident else None
    if ms is None or row is None:
        raise ValidationFailed(
            f"invalid cursor {cursor!r}: expected '<created_at_ms>:<id>' of a listed item",
            code="invalid_cursor",
        )
    return ms, int(row[0])


def page_by_creation(
    ctx: Ctx,
    page: str,
    seq_of: str,
    filters: Mapping[str, str | None],
    limit: int,
    cursor: str | None,
    from_row: Callable[[Any], T],
) -> tuple[list[T], str | None]:
    """One page (items, next cursor) of a table in creation order.

    ``page`` is the statement listing it, given ``filters`` (the columns it compares, by
    name), ``after_ms``/``after_seq`` (the cursor's place, None for the first page) and
    ``limit``; ``seq_of`` answers a listed item's ``seq`` (:func:`parse_created_cursor`). The
    cursor is ``<created_at_ms>:<id>`` of the page's last item, exclusive.
    """
    check_limit(limit)
    after: tuple[int | None, int | None] = (None, None)
    if cursor is not None:
        after = parse_created_cursor(ctx, cursor, seq_of)
    params = {**filters, "after_ms": after[0], "after_seq": after[1], "limit": limit + 1}
    rows = ctx.all(page, params)
    items = [from_row(r) for r in rows[:limit]]
    if len(rows) <= limit or not items:
        return items, None
    last = rows[limit - 1]
    return items, f"{last['created_at_ms']}:{last['id']}"


#: The task page statement by (a stage given, a pipeline given): each filter set its own.
_TASK_PAGES = {
    (False, False): "tasks.page",
    (True, False): "tasks.page_by_stage",
    (False, True): "tasks.page_by_pipeline",
    (True, True): "tasks.page_by_stage_pipeline",
}


def list_tasks(
    ctx: Ctx, stage: str | None, pipeline_id: str | None, limit: int, cursor: str | None
) -> Page[Task]:
    """Tasks in creation order, a page at a time, each with its :class:`ListedState` (extension
    ``list_state``: its latest run and whether it is blocked, read in the page's statement)."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import Page

    page = _TASK_PAGES[stage is not None, pipeline_id is not None]
    filters = {"stage": stage, "pipeline_id": pipeline_id}
    items, nxt = page_by_creation(ctx, page, "tasks.seq_of", filters, limit, cursor, _listed)
    return Page[Task](items=items, next_cursor=nxt)


def _listed(row: Any) -> Task:
    """A listed task from a page row: the ``tasks`` columns, then ``run_status``,
    ``run_attempt``, ``run_agent_id`` (NULL: never claimed) and ``blocked``."""
    run = None
    if row["run_status"] is not None:
        run = ListedRun(
            status=row["run_status"], attempt=row["run_attempt"], agent_id=row["run_agent_id"]
        )
    listed = ListedState(latest_run=run, blocked=bool(row["blocked"]))
    return task_from_row(row).model_copy(update={"listed": listed})


def get_task(ctx: Ctx, task_id: str) -> TaskDetail:
    """The task with its latest run, dependencies, assignments and available transitions."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import TaskDetail

    row = ctx.one("common.task", (task_id,))
    if row is None:
        raise NotFound(f"task {task_id} not found", code="not_found")
    run = ctx.one("tasks.latest_run", (task_id,))
    pipeline = task_pipeline(ctx, row)  # a running task's: the version it was claimed under
    base = task_from_row(row)
    return TaskDetail.model_validate(
        {
            **dict(base),
            "latest_run": None if run is None else run_from_row(run),
            "dependencies": dependencies_of(ctx, task_id),
            "assignments": list_assignments(ctx, task_id),
            "available_transitions": pipeline.available(row["stage"]),
            "budget": budgets.status(ctx, row, pipeline),
        }
    )


def list_runs(ctx: Ctx, task_id: str) -> list[Run]:
    """Every run of a task, by attempt."""
    ctx.task_row(task_id)
    rows = ctx.all("tasks.runs", (task_id,))
    return [run_from_row(r) for r in rows]
