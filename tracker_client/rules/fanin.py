"""Fan-in (extension ``fan_in``): the dependency edges a transition's ``wait_for`` adds, checked
whole before the transition writes anything; and the dependents the upstream-failure rule
reaches.

The rule: a dependency that is dead-lettered or cancelled never resolves, so the tasks waiting on
it are dead-lettered too (``upstream_dead_lettered`` / ``upstream_cancelled``), down the graph, in
the write that dead-lettered it (:func:`tracker_client.rules.runs.dead_letter`). Requeueing
the upstream does not revive them: requeue them too.

Runs on the database thread inside a transaction; reads ``tasks`` and ``dependencies``, writes
``dependencies`` and the ``has_deps`` flag only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tracker_client.agent_models import UPSTREAM_CANCELLED, UPSTREAM_DEAD_LETTERED
from tracker_client.errors import Conflict, NotFound, ValidationFailed
from tracker_client.rules.common import Ctx

if TYPE_CHECKING:
    import sqlite3

__all__ = ["add_edges", "check_wait_for", "dead_upstream", "upstream_reason", "waiting_on"]

#: The most task ids one transition may wait for.
MAX_WAIT_FOR = 1000


def _path(ctx: Ctx, start: str, goal: str) -> list[str] | None:
    """A path ``start`` -> ... -> ``goal`` along "depends on" edges, if one exists."""
    parent: dict[str, str | None] = {start: None}
    stack = [start]
    while stack:
        node = stack.pop()
        if node == goal:
            path = [node]
            while (up := parent[path[-1]]) is not None:
                path.append(up)
            return list(reversed(path))
        for (nxt,) in ctx.all("fanin.upstreams", (node,)):
            if nxt not in parent:
                parent[nxt] = node
                stack.append(nxt)
    return None


def check_wait_for(ctx: Ctx, task_id: str, wait_for: Sequence[str]) -> list[str]:
    """The ids of ``wait_for`` that are new edges of ``task_id`` (in order, once each), after
    checking them all: ``NotFound`` for an unknown id, ``Conflict`` ``dependency_cycle`` for the
    task itself or an id that (transitively) waits for it, naming the cycle. Writes nothing."""
    if isinstance(wait_for, str) or not all(isinstance(i, str) and i for i in wait_for):
        raise ValidationFailed(
            "wait_for must be a list of task ids (non-empty strings)", code="invalid_wait_for"
        )
    ids = list(dict.fromkeys(wait_for))
    if len(ids) > MAX_WAIT_FOR:
        raise ValidationFailed(
            f"wait_for lists {len(ids)} tasks; at most {MAX_WAIT_FOR}", code="invalid_wait_for"
        )
    fresh: list[str] = []
    for upstream in ids:
        if upstream == task_id:
            raise Conflict(
                f"wait_for: task {task_id} cannot wait for itself (a dependency cycle)",
                code="dependency_cycle",
            )
        if ctx.one("tasks.exists", (upstream,)) is None:
            raise NotFound(f"wait_for: task {upstream} not found", code="wait_for_not_found")
        if ctx.one("fanin.edge", (task_id, upstream)):
            continue  # already waits for it
        path = _path(ctx, upstream, task_id)
        if path is not None:
            chain = " -> ".join([task_id, *path])
            raise Conflict(
                f"wait_for: {task_id} waiting for {upstream} would close a dependency cycle: "
                f"{chain}",
                code="dependency_cycle",
            )
        fresh.append(upstream)
    return fresh


def add_edges(ctx: Ctx, task_id: str, upstreams: Sequence[str]) -> None:
    """Insert the (checked) edges ``task_id`` -> each of ``upstreams``."""
    for upstream in upstreams:
        ctx.exec("tasks.add_dependency", (task_id, upstream, ctx.now))
    if upstreams:
        ctx.exec("fanin.flag_deps", (task_id,))


def upstream_reason(upstream: sqlite3.Row) -> str:
    """The dead-letter reason a dependent of this dead-lettered ``upstream`` gets: a cancelled
    upstream (or one cancelled up its own chain) gives ``upstream_cancelled``."""
    reason = upstream["dead_letter_reason"]
    if reason in ("cancelled", UPSTREAM_CANCELLED):
        return UPSTREAM_CANCELLED
    return UPSTREAM_DEAD_LETTERED


def dead_upstream(ctx: Ctx, task_id: str) -> sqlite3.Row | None:
    """The first dependency of ``task_id`` that is dead-lettered (it never resolves), or None."""
    return ctx.one("fanin.dead_upstream", (task_id,))


def waiting_on(ctx: Ctx, upstream_id: str) -> list[sqlite3.Row]:
    """The unfinished tasks that depend on ``upstream_id`` (its waiting dependents)."""
    return ctx.all("fanin.waiting_on", (upstream_id,))
