"""The task and artifact writes' quirks on a NullTickets server.

Functions of a :class:`~tracker_client.nulltickets.wire.Wire` that
:class:`~tracker_client.nulltickets.client.RemoteTracker` delegates to:

* a task body: the embedded tracker's extension fields are refused on a plain server (it would
  ignore them silently), and a task without (part of) a retry policy gets the bounded default
  NullTickets can express (5 attempts, a constant 1 s apart) instead of NullTickets' own
  unlimited attempts with no delay;
* ``create_tasks``: split into requests that fit the size limit (:func:`.limits.split_bulk`);
  a split batch is no longer atomic, and resumes under the same idempotency key;
* ``add_artifact``: NullTickets answers 500 (not 404) for an unknown ``task_id``/``run_id``, so
  after a 500 the ids are checked and an unknown one is ``NotFound``;
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracker_client.contract.wire_models import IdAnswer, IdsAnswer
from tracker_client.errors import (
    NotFound,
    TrackerError,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)
from tracker_client.models import ArtifactCreate, TaskCreate, TaskDetail
from tracker_client.nulltickets.codec import check_json, dumps
from tracker_client.nulltickets.limits import HEADER_ALLOWANCE, split_bulk
from tracker_client.nulltickets.reads import get_task
from tracker_client.nulltickets.wire import Wire, log

__all__ = [
    "NULLTICKETS_DEFAULT_RETRY",
    "add_artifact",
    "create_tasks",
    "task_body",
]

#: What a task without (part of) a retry policy gets on a plain NullTickets server: bounded,
#: with the constant delay NullTickets can do (no backoff there).
NULLTICKETS_DEFAULT_RETRY = {"max_attempts": 5, "retry_delay_ms": 1_000}
#: TaskCreate fields only the embedded tracker (and the served one) understands.
_EXTENSION_FIELDS = ("concurrency_key", "expires_at_ms", "queue_ttl_ms", "max_stale_attempts")
#: TaskCreate fields that need a later ``/health`` extension (an older served tracker, with
#: ``backlog`` but not these, would ignore them silently too).
_LATER_FIELDS = {
    "run_at_ms": "delayed_tasks",
    "delay_ms": "delayed_tasks",
    "dedupe_key": "dedupe",
    "dedupe_window_ms": "dedupe",
    "parent_id": "subtasks",
    "budgets": "budgets",
}


async def task_body(wire: Wire, task: TaskCreate, what: str) -> dict[str, Any]:
    """The JSON body of one task to create, fitted to what the server understands."""
    check_json(task.metadata, f"{what}: task {task.title[:60]!r}: metadata")
    if not isinstance(task.metadata, dict):
        # As the embedded/served tracker: executors read keys of it (NullTickets takes any).
        raise ValidationFailed(
            f"{what}: task {task.title[:60]!r}: metadata must be a JSON object",
            code="invalid_metadata",
        )
    body = task.model_dump(mode="json", exclude_none=True)
    body.setdefault("description", "")
    if task.retry_policy is not None:
        # As given: an explicit ``max_attempts: null`` asks for unlimited attempts, while an
        # omitted one gets the rail's bounded default (served tracker; NullTickets: null).
        body["retry_policy"] = task.retry_policy.model_dump(mode="json", exclude_unset=True)
    later = [
        name
        for name, ext in _LATER_FIELDS.items()
        if body.get(name) is not None and not await wire.discovery.has(ext)
    ]
    if await wire.discovery.has("backlog") and not later:
        return body
    used = [name for name in _EXTENSION_FIELDS if body.get(name) is not None] + later
    policy = body.get("retry_policy") or {}
    if policy.get("backoff", "constant") != "constant" or policy.get("max_retry_delay_ms"):
        used.append("retry_policy.backoff")
    if used:
        raise Unsupported(
            f"{what}: the NullTickets server at {wire.discovery.url} does not support "
            f"{', '.join(used)} (embedded-tracker extensions); it would silently ignore them",
            code="unsupported",
        )
    # NullTickets' own default is unlimited attempts with no delay (a failing executor
    # hot-loops forever); send the bounded default it can express: 5 attempts, 1 s apart.
    policy = body.setdefault("retry_policy", {})
    policy.setdefault("max_attempts", NULLTICKETS_DEFAULT_RETRY["max_attempts"])
    if not any(k in policy for k in ("retry_delay_ms", "backoff", "max_retry_delay_ms")):
        policy["retry_delay_ms"] = NULLTICKETS_DEFAULT_RETRY["retry_delay_ms"]
    return body


async def create_tasks(
    wire: Wire, tasks: Sequence[TaskCreate], idempotency_key: str | None
) -> list[str]:
    """``create_tasks`` in as many requests as the size limit needs (chunk ``n`` under the key
    ``<key>.<n>``); an error after some chunks carries ``created_ids`` and a note."""
    if not tasks:
        raise ValidationFailed("create_tasks: empty task list", code="invalid_request")
    key = wire.key(idempotency_key)
    await wire.discovery.get()
    items = [dumps(await task_body(wire, t, "create_tasks")) for t in tasks]
    budget = wire.http.max_request_bytes - HEADER_ALLOWANCE
    chunks = split_bulk(items, budget, [t.title for t in tasks])
    ids: list[str] = []
    for number, chunk in enumerate(chunks):
        raw = b'{"tasks":[' + b",".join(items[i] for i in chunk) + b"]}"
        chunk_key = key if len(chunks) == 1 else f"{key}.{number}"
        try:
            got = await wire.call(
                "create_tasks", raw=raw, idempotency_key=chunk_key, into=IdsAnswer
            )
        except TrackerError as exc:
            if ids:
                exc.created_ids = list(ids)  # type: ignore[attr-defined]
                exc.add_note(
                    f"create_tasks was split into {len(chunks)} requests; {len(ids)} task(s) "
                    "were created before this error (exc.created_ids); retry with the same "
                    "idempotency_key to resume"
                )
            raise
        if len(got.ids) != len(chunk):
            raise TrackerUnavailable(
                "POST /tasks/bulk: answer without the expected 'ids' list",
                code="invalid_response",
            )
        ids.extend(got.ids)
    if len(chunks) > 1:
        log.info(
            "bulk create of %d tasks sent as %d requests",
            len(tasks),
            len(chunks),
            extra={"action": "bulk_split"},
        )
    return ids


async def add_artifact(wire: Wire, artifact: ArtifactCreate, idempotency_key: str | None) -> str:
    """``add_artifact``; after a 500 the ids are checked first (unknown: ``NotFound``), and the
    write is tried again only when the client retries at all (the same key and bytes)."""
    check_json(artifact.meta, "artifact meta")
    body = artifact.model_dump(mode="json", exclude_none=True)
    key = wire.key(idempotency_key)
    try:
        answer = await wire.call(
            "add_artifact", body=body, idempotency_key=key, retry=False, into=IdAnswer
        )
    except TrackerUnavailable as exc:
        if exc.code in ("internal_error", "server_error"):
            await _check_artifact_refs(wire, artifact, exc)
        if not wire.http.retry.retries:
            raise
        answer = await wire.call("add_artifact", body=body, idempotency_key=key, into=IdAnswer)
    return answer.id


async def _check_artifact_refs(wire: Wire, artifact: ArtifactCreate, exc: Exception) -> None:
    detail: TaskDetail | None = None
    if artifact.task_id is not None:
        try:
            detail = await get_task(wire, artifact.task_id)
        except NotFound as missing:
            raise NotFound(
                f"add_artifact: task {artifact.task_id!r} does not exist",
                code="task_not_found",
            ) from missing
    if artifact.run_id is None:
        return
    if detail is not None and detail.latest_run and detail.latest_run.id == artifact.run_id:
        return
    raise NotFound(
        f"add_artifact: the tracker failed (500) and run {artifact.run_id!r} is not the "
        "latest run of the task: it most likely does not exist (NullTickets answers 500 for "
        "an unknown run id)",
        code="run_not_found",
    ) from exc
