"""``backlog-worker task list``: tasks filtered by pipeline, stage, role and state, by priority.

The tracker lists tasks in creation order, filtered by pipeline and stage only. This command
reads every matching page, derives each task's role (its stage's ``agent_role``) and state
(:data:`STATES`), filters and sorts them, and prints the first ``--limit``. A rail lists each
task's latest run with it (extension ``list_state``: one request per page); on a plain
NullTickets server an open task's state takes a read of that task.

It may touch the tracker (reads only: tasks, pipelines) and the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import click
from rich import box
from rich.table import Table

from tracker_client.models import (
    CORRUPT_MARKER,
    ListedRun,
    ListedState,
    Pipeline,
    Task,
    TaskDetail,
)
from tracker_client.protocol import Tracker
from tracker_client.task_states import (
    STATES,
    coarse_state,
    stage_definition,
    state_of,
    task_state,
)
from worker.cli.ops.common import (
    EXIT_USAGE,
    OpsContext,
    OpsError,
    common_options,
    fmt_when,
    now_ms,
    resolve_pipeline,
)

__all__ = [
    "STATES",  # re-exported from tracker_client.task_states
    "ListedTask",
    "decode_cursor",
    "encode_cursor",
    "sort_key",
    "task_list",
    "task_state",
]

#: Tasks read per tracker call.
PAGE = 1000


@dataclass
class ListedTask:
    """A task as listed: its role, and its state once known (from the listing, or on a plain
    NullTickets server from a read of the open task)."""

    task: Task
    role: str | None
    state: str | None = None
    detail: str = ""

    async def resolve(self, tracker: Tracker, pipeline: Pipeline | None, now: int) -> None:
        """Settle ``state`` and the words of the state column: from the listing's
        ``Task.listed`` (extension ``list_state``), else (a plain NullTickets server) from
        reading the open task whole, one request each."""
        if self.detail:
            return
        stage = stage_definition(pipeline, self.task.stage)
        listed = self.task.listed
        if listed is None and coarse_state(self.task, stage) is None:
            listed = _listed_of(await tracker.get_task(self.task.id))
        run = listed.latest_run if listed is not None else None
        self.state = state_of(self.task, stage, run.status if run is not None else None)
        self.detail = _describe(self.task, self.state, listed, now)


def _listed_of(detail: TaskDetail) -> ListedState:
    """What a ``list_state`` listing would have said of the task read whole."""
    run = detail.latest_run
    return ListedState(
        latest_run=None
        if run is None
        else ListedRun(status=run.status, attempt=run.attempt, agent_id=run.agent_id),
        blocked=any(not d.resolved for d in detail.dependencies),
    )


def _role(pipeline: Pipeline | None, stage: str) -> str | None:
    role = stage_definition(pipeline, stage).get("agent_role")
    return role if isinstance(role, str) else None


def _describe(task: Task, state: str, listed: ListedState | None, now: int) -> str:
    corrupt = isinstance(task.metadata, dict) and CORRUPT_MARKER in task.metadata
    if state == "dead":
        return f"dead ({task.dead_letter_reason})" + (", corrupt metadata" if corrupt else "")
    if corrupt:
        return "corrupt metadata (dead-lettered at its next claim)"
    run = listed.latest_run if listed is not None else None
    if state == "running" and run is not None:
        return f"running (attempt {run.attempt}, {run.agent_id})"
    words = state
    if state == "failed" and run is not None:
        words = f"failed (attempt {run.attempt})"
    if task.next_eligible_at_ms > now:
        words += f", retry at {fmt_when(task.next_eligible_at_ms)}"
    elif listed is not None and listed.blocked:
        words += ", blocked"
    return words


def _known(what: str, given: str, known: Iterable[str], where: str = "") -> OpsError:
    names = ", ".join(sorted(set(known))) or "none"
    return OpsError(f"unknown {what} {given!r}{where} (known: {names})", EXIT_USAGE)


async def _read_all(tracker: Tracker, stage: str | None, pipeline_id: str | None) -> list[Task]:
    items: list[Task] = []
    cursor: str | None = None
    while True:
        page = await tracker.list_tasks(
            stage=stage, pipeline_id=pipeline_id, limit=PAGE, cursor=cursor
        )
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None or not page.items:
            return items


async def select_tasks(
    tracker: Tracker,
    *,
    pipeline: str | None,
    stage: str | None,
    role: str | None,
    states: tuple[str, ...],
    sort: str,
) -> tuple[list[ListedTask], dict[str, Pipeline]]:
    """The matching tasks, sorted; ``OpsError`` for an unknown pipeline, stage or role."""
    pipelines = {p.id: p for p in await tracker.list_pipelines()}
    scope = list(pipelines.values())
    where = ""
    if pipeline:
        chosen = await resolve_pipeline(tracker, pipeline)
        scope, where = [chosen], f" in pipeline {chosen.name}"
    if stage is not None:
        stages = [s for p in scope for s in (p.definition.get("states") or {})]
        if stage not in stages:
            raise _known("stage", stage, stages, where)
    if role is not None:
        roles = [r for p in scope for s in (p.definition.get("states") or {}) if (r := _role(p, s))]
        if role not in roles:
            raise _known("role", role, roles, where)
    pipeline_id = scope[0].id if pipeline else None
    now = now_ms()
    # An open task's state needs its latest run: the listing carries it (``list_state``); on a
    # plain NullTickets server it is one read each, only when --state asks for an open state,
    # otherwise only for the tasks shown (see ``show``).
    open_states = bool(set(states) & {"waiting", "running", "failed"})
    listed: list[ListedTask] = []
    for task in await _read_all(tracker, stage, pipeline_id):
        p = pipelines.get(task.pipeline_id)
        entry = ListedTask(
            task, _role(p, task.stage), coarse_state(task, stage_definition(p, task.stage))
        )
        if role is not None and entry.role != role:
            continue
        if states and entry.state is not None and entry.state not in states:
            continue
        if states and entry.state is None:
            if not open_states:
                continue
            await entry.resolve(tracker, p, now)
            if entry.state not in states:
                continue
        listed.append(entry)
    # Python's sort is stable: ties keep the tracker's creation order (it breaks equal
    # creation times by insertion, which a listed task doesn't carry).
    listed.sort(key=lambda t: sort_key(t.task, sort)[:2])
    return listed, pipelines


def sort_key(task: Task, sort: str) -> tuple[int, int, str]:
    """Where ``task`` goes: highest priority first then oldest, or oldest first."""
    return (-task.priority if sort == "priority" else 0, task.created_at_ms, task.id)


def encode_cursor(task: Task, sort: str) -> str:
    """A cursor after ``task`` in ``sort`` order: the next page starts right after that task
    (or, once it is gone, after its sort key), so tasks created or finished in between neither
    repeat nor push others out of sight."""
    prio, created, task_id = sort_key(task, sort)
    return f"{sort[0]}:{prio}:{created}:{task_id}"


def after_cursor(listed: list[ListedTask], cursor: str, sort: str) -> list[ListedTask]:
    """The tasks of ``listed`` (sorted) that come after ``cursor``."""
    prio, created, task_id = decode_cursor(cursor, sort)
    for i, t in enumerate(listed):
        if t.task.id == task_id:
            return listed[i + 1 :]
    return [t for t in listed if sort_key(t.task, sort)[:2] > (prio, created)]


def decode_cursor(cursor: str, sort: str) -> tuple[int, int, str]:
    """The key a cursor of :func:`encode_cursor` stands for; ``OpsError`` when it is not one."""
    parts = cursor.split(":", 3)
    try:
        if len(parts) != 4 or parts[0] != sort[0]:
            raise ValueError(cursor)
        return int(parts[1]), int(parts[2]), parts[3]
    except ValueError:
        raise OpsError(
            f"--cursor {cursor!r} is not a cursor printed by task list --sort {sort}", EXIT_USAGE
        ) from None


@click.command("list")
@click.option("--pipeline", "-p", metavar="NAME|ID", help="Only this pipeline.")
@click.option("--stage", "-s", help="Only tasks in this stage (an unknown stage is an error).")
@click.option("--role", "-r", help="Only tasks in this role's stages.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(list(STATES)),
    help="Only tasks in this state (repeatable): "
    + "; ".join(f"{k}: {v}" for k, v in STATES.items())
    + ".",
)
@click.option(
    "--sort",
    type=click.Choice(["priority", "created"]),
    default="priority",
    show_default=True,
    help="priority: highest first, then oldest; created: oldest first.",
)
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--cursor", help="Continue after this cursor (printed by the previous page).")
@click.option("--all", "all_tasks", is_flag=True, help="Every matching task (no --limit).")
@common_options
def task_list(
    pipeline: str | None,
    stage: str | None,
    role: str | None,
    states: tuple[str, ...],
    sort: str,
    limit: int,
    cursor: str | None,
    all_tasks: bool,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """List tasks, highest priority first (then oldest), filtered by pipeline, stage, role and
    state; the first --limit are printed, and how many more matched."""
    ops = OpsContext.build(tracker_url, config_path, as_json)

    async def show(tracker: Tracker) -> int:
        listed, pipelines = await select_tasks(
            tracker, pipeline=pipeline, stage=stage, role=role, states=states, sort=sort
        )
        after = listed
        if cursor is not None:
            after = after_cursor(listed, cursor, sort)
        shown = after if all_tasks else after[:limit]
        now = now_ms()
        for t in shown:
            await t.resolve(tracker, pipelines.get(t.task.pipeline_id), now)
        more = len(after) - len(shown)
        next_cursor = encode_cursor(shown[-1].task, sort) if more and shown else None
        if ops.as_json:
            items = [
                {**t.task.model_dump(mode="json"), "role": t.role, "state": t.state} for t in shown
            ]
            ops.emit_json({"items": items, "total": len(listed), "next_cursor": next_cursor})
            return 0
        ops.print(_table(ops, shown, pipelines, len(listed)))
        if next_cursor is not None:
            ops.print(f"{more} more: --cursor {next_cursor} (or --limit, --all)")
        return 0

    ops.run(show)


def _table(
    ops: OpsContext, shown: list[ListedTask], pipelines: dict[str, Pipeline], total: int
) -> Table:
    several = len({t.task.pipeline_id for t in shown}) > 1
    wide = ops.console.width >= 120
    title = f"tasks ({total})" if total == len(shown) else f"tasks ({len(shown)} of {total})"
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1))
    table.add_column("id", no_wrap=True)
    table.add_column("title", overflow="fold", ratio=1, min_width=12)
    if several:
        table.add_column("pipeline", overflow="fold")
    for col in ("stage", "role", "prio", "state"):
        table.add_column(col, overflow="fold")
    if wide:
        table.add_column("created", no_wrap=True)
    for t in shown:
        p = pipelines.get(t.task.pipeline_id)
        cells = [t.task.id, t.task.title]
        if several:
            cells.append(p.name if p else t.task.pipeline_id)
        cells += [t.task.stage, t.role or "-", str(t.task.priority), t.detail]
        if wide:
            cells.append(fmt_when(t.task.created_at_ms))
        table.add_row(*cells)
    return table
