"""The agent extensions on any rail: one function per operation, with the plain-NullTickets way
when the rail lacks the extension, so a caller (the worker's executor side, the CLI, the
producer) never branches on rails.

Where the rail lists the extension (``await tracker.capabilities()``), each function is the
tracker's own operation. On a plain NullTickets server (or any rail without it):

* :func:`spawn`: the child is created with ``metadata["parent_id"]`` (no cancel cascade there);
* :func:`transition_waiting`: ``add_dependency`` per id, then the transition. **Not atomic**: an
  edge added before a failing one (a cycle) or before a refused transition stays;
* :func:`save_checkpoint` / :func:`previous_checkpoint`: the KV store, namespace
  :data:`~tracker_client.agent_models.CHECKPOINT_NAMESPACE`, key = the task id, written with the
  caller's (the worker's admin) credentials; same 64 KiB limit;
* :func:`upstream_of`: composed from ``list_dependencies``, ``get_task``, ``get_pipeline``, the
  runs' events and ``list_artifacts``;
* :func:`transition_task` (human steps): ``Unsupported`` with a message saying why (NullTickets
  moves a task only under a lease).

The upstream-failure rule (a dead-lettered or cancelled dependency dead-letters its waiting
dependents) is the rail's; a plain NullTickets server has no such rule.

Imports the protocol, the models and the errors only (no implementation).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tracker_client.agent_models import (
    CHECKPOINT_NAMESPACE,
    MAX_CHECKPOINT_BYTES,
    UPSTREAM_CANCELLED,
    Upstream,
    UpstreamOutcome,
)
from tracker_client.capabilities import LeaseRef
from tracker_client.errors import Conflict, NotFound, TrackerError, Unsupported, ValidationFailed
from tracker_client.models import Artifact, Lease, Task, TransitionResult
from tracker_client.protocol import Tracker

if TYPE_CHECKING:
    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import TaskCreate, TaskDetail

__all__ = [
    "checkpoint_size",
    "has_extension",
    "parent_of",
    "pipeline_id_of",
    "previous_checkpoint",
    "save_checkpoint",
    "spawn",
    "transition_task",
    "transition_waiting",
    "upstream_of",
]


async def has_extension(tracker: Tracker, name: str) -> bool:
    """Whether the rail lists the extension ``name`` (a key of ``contract.EXTENSIONS``)."""
    return name in (await tracker.capabilities()).extensions


# -- subtasks -------------------------------------------------------------------------------------
async def pipeline_id_of(tracker: Tracker, pipeline: str) -> str:
    """The id of the pipeline named (or with the id) ``pipeline``; ``NotFound`` naming it and
    the known names otherwise."""
    pipelines = await tracker.list_pipelines()
    for p in pipelines:
        if pipeline in (p.id, p.name):
            return p.id
    known = ", ".join(sorted(p.name for p in pipelines)) or "none"
    raise NotFound(f"pipeline {pipeline!r} not found (known: {known})", code="pipeline_not_found")


async def spawn(
    tracker: Tracker, task: TaskCreate, *, parent_id: str, idempotency_key: str | None = None
) -> str:
    """Create ``task`` as a child of ``parent_id``; its id. Extension ``subtasks``: the rail
    links it (``Task.parent_id``, cancel cascades); else ``metadata["parent_id"]``."""
    if await has_extension(tracker, "subtasks"):
        child = task.model_copy(update={"parent_id": parent_id})
    else:
        metadata = dict(task.metadata) if isinstance(task.metadata, dict) else task.metadata
        if isinstance(metadata, dict):
            metadata["parent_id"] = parent_id
        child = task.model_copy(update={"metadata": metadata, "parent_id": None})
    return await tracker.create_task(child, idempotency_key=idempotency_key)


def parent_of(task: Task) -> str | None:
    """The task's parent: ``parent_id``, or (a plain NullTickets rail) ``metadata.parent_id``."""
    if task.parent_id is not None:
        return task.parent_id
    meta = task.metadata
    value = meta.get("parent_id") if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


# -- fan-in ---------------------------------------------------------------------------------------
async def transition_waiting(
    tracker: Tracker,
    lease: LeaseRef,
    trigger: str,
    wait_for: Sequence[str],
    **fields: Any,
) -> TransitionResult:
    """``transition(lease, trigger, wait_for=..., **fields)``: the edges and the move in one
    write (extension ``fan_in``); else each edge by ``add_dependency`` first (one the task
    already has is skipped), then the transition: not atomic there."""
    ids = list(dict.fromkeys(wait_for))
    if not ids or await has_extension(tracker, "fan_in"):
        return await tracker.transition(lease, trigger, wait_for=ids, **fields)
    for upstream in ids:
        try:
            await tracker.add_dependency(lease.task_id, upstream)
        except Conflict as exc:
            if exc.code != "duplicate_dependency":
                raise
    return await tracker.transition(lease, trigger, **fields)


# -- checkpoints ----------------------------------------------------------------------------------
def checkpoint_size(data: Any) -> int:
    """The size of ``data`` as compact JSON; ``ValidationFailed`` naming what is wrong (not JSON,
    over :data:`MAX_CHECKPOINT_BYTES`). Nothing is written by a check."""
    try:
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"checkpoint is not JSON-serialisable: {exc}") from exc
    size = len(text.encode())
    if size > MAX_CHECKPOINT_BYTES:
        raise ValidationFailed(
            f"checkpoint is too large: {size} bytes of JSON, limit {MAX_CHECKPOINT_BYTES} (64 KiB)",
            code="checkpoint_too_large",
        )
    return size


async def save_checkpoint(
    tracker: Tracker,
    lease: LeaseRef,
    data: Any,
    *,
    heartbeat: bool = False,
    lease_ttl_ms: int | None = None,
) -> int | None:
    """Replace the run's checkpoint with ``data``; with ``heartbeat``, in the heartbeat's write
    (the new lease expiry is answered; else None). Extension ``checkpoints``: the rail's run
    checkpoint; else the KV store (the heartbeat then a write of its own)."""
    checkpoint_size(data)
    if await has_extension(tracker, "checkpoints"):
        if heartbeat:
            return await tracker.heartbeat(lease, lease_ttl_ms=lease_ttl_ms, checkpoint=data)
        await tracker.checkpoint(lease, data)
        return None
    expires = await tracker.heartbeat(lease, lease_ttl_ms=lease_ttl_ms) if heartbeat else None
    await tracker.store_put(
        CHECKPOINT_NAMESPACE, lease.task_id, {"run_id": lease.run_id, "data": data}
    )
    return expires


async def previous_checkpoint(tracker: Tracker, lease: Lease) -> Any:
    """The latest checkpoint of the task's earlier runs (None: none): the claim's
    ``previous_checkpoint`` (extension ``checkpoints``), else the KV store's entry."""
    if await has_extension(tracker, "checkpoints"):
        return lease.previous_checkpoint
    try:
        entry = await tracker.store_get(CHECKPOINT_NAMESPACE, lease.task_id)
    except NotFound:
        return None
    value = entry.value
    if not isinstance(value, dict) or value.get("run_id") == lease.run_id:
        return None
    return value.get("data")


# -- upstream -------------------------------------------------------------------------------------
async def upstream_of(tracker: Tracker, task_id: str) -> list[Upstream]:
    """Each dependency of the task: stage, outcome, last ``result``, artifacts (extension
    ``upstream``, one read; else composed from plain reads, a few per dependency)."""
    if await has_extension(tracker, "upstream"):
        return await tracker.list_upstream(task_id)
    out: list[Upstream] = []
    terminal: dict[str, set[str]] = {}
    for dep in await tracker.list_dependencies(task_id):
        try:
            detail = await tracker.get_task(dep.depends_on_task_id)
        except NotFound:
            continue  # purged
        if detail.pipeline_id not in terminal:
            states = (await tracker.get_pipeline(detail.pipeline_id)).definition.get("states", {})
            terminal[detail.pipeline_id] = {
                name for name, s in states.items() if isinstance(s, dict) and s.get("terminal")
            }
        out.append(
            Upstream(
                task_id=detail.id,
                title=detail.title,
                stage=detail.stage,
                outcome=_outcome(detail, terminal[detail.pipeline_id]),
                result=await _last_result(tracker, detail),
                artifacts=await _artifacts(tracker, detail.id),
            )
        )
    return out


def _outcome(detail: TaskDetail, terminal: set[str]) -> UpstreamOutcome:
    reason = detail.dead_letter_reason
    if reason is not None:
        return "cancelled" if reason in ("cancelled", UPSTREAM_CANCELLED) else "dead_lettered"
    return "done" if detail.stage in terminal else "pending"


async def _last_result(tracker: Tracker, detail: TaskDetail) -> Any:
    """The data of the task's last ``result`` event, read run by run from the latest."""
    try:
        runs = await tracker.list_runs(detail.id)
    except TrackerError:
        runs = [detail.latest_run] if detail.latest_run is not None else []
    for run in sorted(runs, key=lambda r: r.attempt, reverse=True):
        found: Any = None
        cursor: str | None = None
        while True:
            page = await tracker.list_events(run.id, limit=1000, cursor=cursor)
            for event in page.items:
                if event.kind == "result":
                    found = event.data
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        if found is not None:
            return found
    return None


async def _artifacts(tracker: Tracker, task_id: str) -> list[Artifact]:
    items: list[Artifact] = []
    cursor: str | None = None
    while True:
        page = await tracker.list_artifacts(task_id=task_id, limit=1000, cursor=cursor)
        items.extend(page.items)
        if page.next_cursor is None:
            return items
        cursor = page.next_cursor


# -- human steps ----------------------------------------------------------------------------------
async def transition_task(
    tracker: Tracker,
    task_id: str,
    trigger: str,
    *,
    expected_stage: str | None = None,
    expected_task_version: int | None = None,
    instructions: str | None = None,
    idempotency_key: str | None = None,
) -> TransitionResult:
    """Move a task waiting at a human step along ``trigger`` (extension ``human_steps``).

    ``expected_stage`` None: the task's stage read first (a move in between is still a 409).
    ``Unsupported`` on a rail without it: NullTickets moves a task only under a lease.
    """
    if not await has_extension(tracker, "human_steps"):
        raise Unsupported(
            "task transition needs the human_steps extension: a plain NullTickets server moves "
            "a task only under a worker's lease (serve the rail with `backlog-worker tracker "
            "serve`, or use an embedded one)",
            code="unsupported",
        )
    if expected_stage is None:
        expected_stage = (await tracker.get_task(task_id)).stage
    return await tracker.transition_task(
        task_id,
        trigger,
        expected_stage=expected_stage,
        expected_task_version=expected_task_version,
        instructions=instructions,
        idempotency_key=idempotency_key,
    )
