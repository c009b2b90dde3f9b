"""What each kind of scoped token may do on the served rail, operation by operation.

Every operation of the contract table is classified here, once (``tests/serve/test_scopes.py``
fails on one that is not): which kinds of scoped token may call it at all, and for some, which
arguments they may call it with:

* a ``worker`` token claims only for its roles (``agent_role`` of ``claim``/``claim_many``/
  ``parked_claim``, and of the claim riding in ``finish_many``: extension ``finish_claim``);
* a ``producer`` token creates tasks only in its pipelines, lists tasks of one of them, and
  reads, waits on or cancels a task only when the task is in one of them;
* a ``read`` token calls reads only (never the store, never the wake-up poll).

Public routes need no token and lease routes the lease's own token, as before; the admin token
may do everything. A refusal is a 403 ``forbidden`` whose message names the scope missing (the
kind, the role or the pipeline), never the token. docs/operate/security.md#scoped-tokens.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tracker_client.contract import table as contract
from tracker_client.errors import NotFound
from tracker_client.protocol import Tracker
from tracker_client.serve.tokens import ScopedToken

__all__ = ["ALLOWED", "BODY_CHECKED", "ScopeGuard"]

#: Operations a worker process sends besides the lease routes (claims are checked by role).
_WORKER = {
    "claim",
    "claim_many",
    "parked_claim",
    "cancel_parked_claim",
    "finish_many",
    "register_worker",
    "wait_for_work",
    "maintenance",
    "ingest_traces",
    "ingest_traces_collector",
    "add_artifact",
    "list_upstream",
    "get_task",
    "list_pipelines",
    "get_pipeline",
    "create_task",
    "create_tasks",
    "store_search",
    "store_put",
    "store_get",
    "store_delete",
    "store_list",
}
#: Operations an application submitting work sends (task-bound ones checked by pipeline).
_PRODUCER = {
    "create_task",
    "create_tasks",
    "list_pipelines",
    "get_pipeline",
    "list_tasks",
    "get_task",
    "wait",
    "cancel",
    "follow_task",
    "list_runs",
    "list_task_events",
    "list_dependencies",
    "list_upstream",
    "list_spans",
}
#: Reads: queue figures, tasks, runs, events, artifacts, schedules, limits, workers.
_READ = {
    "list_pipelines",
    "get_pipeline",
    "list_tasks",
    "get_task",
    "list_dependencies",
    "list_assignments",
    "list_events",
    "list_artifacts",
    "queue_stats",
    "wait",
    "follow_task",
    "list_upstream",
    "list_runs",
    "list_task_events",
    "count_tasks",
    "list_schedules",
    "get_schedule",
    "list_rate_limits",
    "list_workers",
    "list_spans",
}
#: Operation -> the kinds of scoped token that may call it ("any": public or lease routes,
#: which scoped tokens don't change; an empty set: the admin token only).
ALLOWED: dict[str, frozenset[str]] = {
    op.name: (
        frozenset({"any"})
        if op.auth in ("public", "lease")
        else frozenset(
            kind
            for kind, ops in (("worker", _WORKER), ("producer", _PRODUCER), ("read", _READ))
            if op.name in ops
        )
    )
    for op in contract.OPERATIONS
}
#: Operations whose body the check reads (for the kinds that may call them).
BODY_CHECKED: dict[str, frozenset[str]] = {
    "claim": frozenset({"worker"}),
    "claim_many": frozenset({"worker"}),
    "parked_claim": frozenset({"worker"}),
    "finish_many": frozenset({"worker"}),
    "create_task": frozenset({"producer"}),
    "create_tasks": frozenset({"producer"}),
}
#: How long the pipeline names -> ids map is trusted before a miss re-reads it.
_PIPELINES_TTL_S = 5.0


def _words(token: ScopedToken) -> str:
    return f"this {token.kind} token (scope: {token.scope()}, name {token.name!r})"


class ScopeGuard:
    """Checks one request of a scoped token against its scope, reading the rail when a task's
    pipeline decides (``tracker``: the served rail)."""

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker
        self._pipeline_ids: dict[str, str] = {}
        self._read_at = -_PIPELINES_TTL_S

    async def _ids(self, names: tuple[str, ...], *, fresh: bool = False) -> set[str]:
        """The ids of the pipelines ``names`` (a name that is an id counts as that id)."""
        now = time.monotonic()
        if (fresh and now - self._read_at >= 1.0) or now - self._read_at >= _PIPELINES_TTL_S:
            self._pipeline_ids = {p.name: p.id for p in await self._tracker.list_pipelines()}
            self._read_at = now
        return {self._pipeline_ids.get(n, n) for n in names}

    async def _in_pipelines(self, token: ScopedToken, pipeline_id: str) -> bool:
        if pipeline_id in await self._ids(token.pipelines):
            return True
        return pipeline_id in await self._ids(token.pipelines, fresh=True)

    async def refusal(
        self,
        token: ScopedToken,
        op: contract.Operation,
        params: Mapping[str, str],
        query: Mapping[str, str],
        body: Any,
    ) -> str | None:
        """Why ``token`` may not make this call (the 403's message), or None when it may."""
        allowed = ALLOWED[op.name]
        if "any" in allowed:
            return None
        if token.kind not in allowed:
            return f"{_words(token)} may not call {op.name} ({op.method} {op.path})"
        if token.kind == "worker" and op.name in BODY_CHECKED:
            if op.name == "finish_many" and isinstance(body, dict):
                body = body.get("claim")  # the claim riding in it (extension finish_claim)
            role = body.get("agent_role") if isinstance(body, dict) else None
            if isinstance(role, str) and role not in token.roles:
                return f"{_words(token)} may not claim role {role!r}"
            return None
        if token.kind != "producer":
            return None
        return await self._producer_refusal(token, op, params, query, body)

    async def _producer_refusal(
        self,
        token: ScopedToken,
        op: contract.Operation,
        params: Mapping[str, str],
        query: Mapping[str, str],
        body: Any,
    ) -> str | None:
        if op.name in ("create_task", "create_tasks"):
            items = body.get("tasks") if op.name == "create_tasks" else [body]
            if not isinstance(items, list):
                return None  # the endpoint names the malformed body
            for item in items:
                pid = item.get("pipeline_id") if isinstance(item, dict) else None
                if isinstance(pid, str) and not await self._in_pipelines(token, pid):
                    return f"{_words(token)} may not create tasks in pipeline {pid!r}"
            return None
        if op.name == "list_tasks":
            pid = query.get("pipeline_id")
            if pid is None:
                return f"{_words(token)} lists the tasks of its pipelines only: add pipeline_id"
            if not await self._in_pipelines(token, pid):
                return f"{_words(token)} may not list the tasks of pipeline {pid!r}"
            return None
        if op.name == "get_pipeline":
            pid = params.get("pipeline_id", "")
            if not await self._in_pipelines(token, pid):
                return f"{_words(token)} may not read pipeline {pid!r}"
            return None
        task_id = params.get("task_id")
        if task_id is None:
            return None  # list_pipelines: names only
        try:
            task = await self._tracker.get_task(task_id)
        except NotFound:
            return None  # the endpoint answers 404 as for anyone
        if not await self._in_pipelines(token, task.pipeline_id):
            return f"{_words(token)} may not {op.name} task {task_id!r}: not in its pipelines"
        return None
