"""Dependencies and assignments: the edges between tasks and the agents a task is reserved for.

The functions run on the database thread inside a transaction (dependency cycles are refused
there); :class:`~.rail.Rail` is the tracker's face of them, with idempotency keys on the
writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracker_client.errors import Conflict, NotFound, ValidationFailed
from tracker_client.rules.common import Ctx, dependencies_of
from tracker_client.rules.runs import dead_letter_if_upstream_dead

if TYPE_CHECKING:
    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import Dependency

__all__ = [
    "add_dependency",
    "assign",
    "list_dependencies",
    "unassign",
]


# -- dependencies ---------------------------------------------------------------------------------
def _cycle(ctx: Ctx, task_id: str, upstream: str) -> list[str] | None:
    """The path upstream -> ... -> task_id along 'depends on' edges, if one exists."""
    parent: dict[str, str | None] = {upstream: None}
    stack = [upstream]
    while stack:
        node = stack.pop()
        if node == task_id:
            path = [node]
            while parent[path[-1]] is not None:
                path.append(parent[path[-1]])  # type: ignore[arg-type]
            return list(reversed(path))
        for (nxt,) in ctx.all("fanin.upstreams", (node,)):
            if nxt not in parent:
                parent[nxt] = node
                stack.append(nxt)
    return None


def add_dependency(ctx: Ctx, task_id: str, upstream: str) -> None:
    """Make ``task_id`` wait for ``upstream``; refuses self, cycles and duplicates. An upstream
    already dead-lettered or cancelled never resolves: the task is dead-lettered at once."""
    if ctx.one("tasks.exists", (task_id,)) is None:
        raise NotFound(f"task {task_id} not found", code="task_not_found")
    if task_id == upstream:
        raise ValidationFailed(f"task {task_id} cannot depend on itself", code="invalid_dependency")
    if ctx.one("tasks.exists", (upstream,)) is None:
        raise NotFound(f"dependency task {upstream} not found", code="dependency_task_not_found")
    if ctx.one("fanin.edge", (task_id, upstream)):
        raise Conflict(f"task {task_id} already depends on {upstream}", code="duplicate_dependency")
    path = _cycle(ctx, task_id, upstream)
    if path is not None:
        chain = " -> ".join([task_id, *path])
        raise ValidationFailed(
            f"dependency {task_id} -> {upstream} would close a cycle: {chain}",
            code="invalid_dependency",
        )
    ctx.exec("tasks.add_dependency", (task_id, upstream, ctx.now))
    ctx.exec("fanin.flag_deps", (task_id,))
    dead_letter_if_upstream_dead(ctx, task_id)


def list_dependencies(ctx: Ctx, task_id: str) -> list[Dependency]:
    """The task's dependencies (an unknown task has none)."""
    return dependencies_of(ctx, task_id)


# -- assignments ----------------------------------------------------------------------------------
def assign(ctx: Ctx, task_id: str, agent_id: str, assigned_by: str | None) -> None:
    """Make ``agent_id`` the task's only active assignee."""
    if not isinstance(agent_id, str) or not agent_id:
        raise ValidationFailed("agent_id must be a non-empty string")
    if ctx.one("tasks.exists", (task_id,)) is None:
        raise NotFound(f"task {task_id} not found", code="task_not_found")
    now = ctx.now
    ctx.exec("links.deactivate_others", (now, task_id, agent_id))
    ctx.exec("links.assign", (task_id, agent_id, assigned_by, now, now))
    ctx.exec("links.set_assignee", (agent_id, task_id))


def unassign(ctx: Ctx, task_id: str, agent_id: str) -> None:
    """Deactivate ``agent_id``'s active assignment, or ``NotFound``."""
    cur = ctx.exec("links.deactivate", (ctx.now, task_id, agent_id))
    if cur.rowcount == 0:
        raise NotFound(f"task {task_id} has no active assignment of {agent_id}", code="not_found")
    ctx.exec("links.clear_assignee", (task_id,))
