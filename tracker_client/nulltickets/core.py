"""The NullTickets operations proper: pipelines, tasks, leases, runs, artifacts, ops, store.

Every write carries an ``Idempotency-Key``: the caller's key for the logical write, or a fresh
UUID, reused across the retries of that one call only (a claim gets a fresh key on every call, so
a stale cached 204 is never replayed). Heartbeats carry none (a reused key would replay an old
expiry and not extend the lease). Store writes carry none either: PUT/DELETE are idempotent by
nature and the server would cache their errors forever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter

from tracker_client.errors import (
    NotFound,
    TrackerError,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)
from tracker_client.models import (
    Artifact,
    ArtifactCreate,
    Assignment,
    Dependency,
    Event,
    Health,
    Page,
    Pipeline,
    QueueStats,
    StoreEntry,
    Task,
    TaskCreate,
    TaskDetail,
)
from tracker_client.nulltickets.base import Advertised, RemoteBase, log
from tracker_client.nulltickets.limits import HEADER_ALLOWANCE, split_bulk
from tracker_client.nulltickets.transport import check_json, dumps, encode_query, loads
from tracker_client.nulltickets.transport import quote_segment as seg

__all__ = ["MAX_LEASE_TTL_MS", "RemoteCore", "item_cursor"]

_PIPELINES = TypeAdapter(list[Pipeline])
_DEPENDENCIES = TypeAdapter(list[Dependency])
_ASSIGNMENTS = TypeAdapter(list[Assignment])
_STORE_ENTRIES = TypeAdapter(list[StoreEntry])
_TASK_PAGE = TypeAdapter(Page[Task])
_EVENT_PAGE = TypeAdapter(Page[Event])
_ARTIFACT_PAGE = TypeAdapter(Page[Artifact])

#: TaskCreate fields only the embedded tracker (and the served one) understands.
#: What a task without (part of) a retry policy gets on a plain NullTickets server: bounded,
#: with the constant delay NullTickets can do (no backoff there).
NULLTICKETS_DEFAULT_RETRY = {"max_attempts": 5, "retry_delay_ms": 1_000}
_EXTENSION_FIELDS = ("concurrency_key", "expires_at_ms", "queue_ttl_ms", "max_stale_attempts")

MAX_LEASE_TTL_MS = 86_400_000
#: A worker's default lease TTL: the near-expiry window of ``queue_stats`` is a third of it.
DEFAULT_LEASE_TTL_MS = 60_000


def item_cursor(page: Page[Any], kind: str) -> str | None:
    """A cursor built from the last item (the server's own ``next_cursor`` skips an item)."""
    if page.next_cursor is None or not page.items:
        return None
    last = page.items[-1]
    return str(last.id) if kind == "event" else f"{last.created_at_ms}:{last.id}"


class RemoteCore(RemoteBase):
    """The operations every NullTickets server offers, made safe (see the module docstring)."""

    # -- lifecycle ----------------------------------------------------------------------------
    async def health(self) -> Health:
        """``GET /health``; also refreshes what the server advertises about itself."""
        response = await self._http.send("GET", "/health", auth="public")
        doc = loads(response, "GET /health")
        self._set_caps(Advertised.from_health(doc))
        return self._parse(Health, doc, "GET /health")

    # -- pipelines ----------------------------------------------------------------------------
    async def create_pipeline(
        self, name: str, definition: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> str:
        """``POST /pipelines``; returns the id."""
        check_json(definition, "pipeline definition")
        doc = await self._json(
            "POST",
            "/pipelines",
            # Sent as given: the tracker names what is wrong with a definition that is no object.
            body={
                "name": name,
                "definition": dict(definition) if isinstance(definition, Mapping) else definition,
            },
            idempotency_key=self._key(idempotency_key),
        )
        return self._id(doc, "POST /pipelines")

    async def list_pipelines(self) -> list[Pipeline]:
        """``GET /pipelines``, newest first."""
        return self._parse(_PIPELINES, await self._json("GET", "/pipelines"), "GET /pipelines")

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        """``GET /pipelines/{id}``."""
        doc = await self._json("GET", f"/pipelines/{seg(pipeline_id)}")
        return self._parse(Pipeline, doc, "GET /pipelines/{id}")

    # -- tasks --------------------------------------------------------------------------------
    async def _task_body(self, task: TaskCreate, what: str) -> dict[str, Any]:
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
        if not await self._has("backlog"):
            used = [name for name in _EXTENSION_FIELDS if body.get(name) is not None]
            policy = body.get("retry_policy") or {}
            if policy.get("backoff", "constant") != "constant" or policy.get("max_retry_delay_ms"):
                used.append("retry_policy.backoff")
            if used:
                raise Unsupported(
                    f"{what}: the NullTickets server at {self.url} does not support "
                    f"{', '.join(used)} (embedded-tracker extensions); it would silently ignore "
                    "them",
                    code="unsupported",
                )
            # NullTickets' own default is unlimited attempts with no delay (a failing executor
            # hot-loops forever); send the bounded default it can express: 5 attempts, 1 s apart.
            policy = body.setdefault("retry_policy", {})
            policy.setdefault("max_attempts", NULLTICKETS_DEFAULT_RETRY["max_attempts"])
            if not any(k in policy for k in ("retry_delay_ms", "backoff", "max_retry_delay_ms")):
                policy["retry_delay_ms"] = NULLTICKETS_DEFAULT_RETRY["retry_delay_ms"]
        return body

    async def create_task(self, task: TaskCreate, *, idempotency_key: str | None = None) -> str:
        """``POST /tasks``; returns the id."""
        body = await self._task_body(task, "create_task")
        doc = await self._json(
            "POST", "/tasks", body=body, idempotency_key=self._key(idempotency_key)
        )
        return self._id(doc, "POST /tasks")

    async def create_tasks(
        self, tasks: Sequence[TaskCreate], *, idempotency_key: str | None = None
    ) -> list[str]:
        """``POST /tasks/bulk``, split into requests that fit the server's size limit.

        One request is all or nothing. When the batch must be split (only on a NullTickets
        server: ``tracker serve`` takes large requests), each request is atomic but the batch is
        not: on an error the exception carries ``created_ids`` (the tasks already created) and
        calling again with the *same* ``idempotency_key`` resumes without duplicating them.
        """
        if not tasks:
            raise ValidationFailed("create_tasks: empty task list", code="invalid_request")
        key = self._key(idempotency_key)
        await self._capabilities()
        items = [dumps(await self._task_body(t, "create_tasks")) for t in tasks]
        budget = self._http.max_request_bytes - HEADER_ALLOWANCE
        chunks = split_bulk(items, budget, [t.title for t in tasks])
        ids: list[str] = []
        for number, chunk in enumerate(chunks):
            raw = b'{"tasks":[' + b",".join(items[i] for i in chunk) + b"]}"
            chunk_key = key if len(chunks) == 1 else f"{key}.{number}"
            try:
                doc = await self._json("POST", "/tasks/bulk", raw=raw, idempotency_key=chunk_key)
            except TrackerError as exc:
                if ids:
                    exc.created_ids = list(ids)  # type: ignore[attr-defined]
                    exc.add_note(
                        f"create_tasks was split into {len(chunks)} requests; {len(ids)} task(s) "
                        "were created before this error (exc.created_ids); retry with the same "
                        "idempotency_key to resume"
                    )
                raise
            got = doc.get("ids") if isinstance(doc, dict) else None
            if not isinstance(got, list) or len(got) != len(chunk):
                raise TrackerUnavailable(
                    "POST /tasks/bulk: answer without the expected 'ids' list",
                    code="invalid_response",
                )
            ids.extend(str(i) for i in got)
        if len(chunks) > 1:
            log.info(
                "bulk create of %d tasks sent as %d requests",
                len(tasks),
                len(chunks),
                extra={"action": "bulk_split"},
            )
        return ids

    async def list_tasks(
        self,
        *,
        stage: str | None = None,
        pipeline_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[Task]:
        """``GET /tasks``; ``next_cursor`` is rebuilt from the last item (no skipped task)."""
        self._check_limit(limit, "list_tasks")
        query = encode_query(
            {"stage": stage, "pipeline_id": pipeline_id, "limit": limit, "cursor": cursor}
        )
        page = self._parse(_TASK_PAGE, await self._json("GET", f"/tasks?{query}"), "GET /tasks")
        return Page[Task](items=page.items, next_cursor=item_cursor(page, "task"))

    async def get_task(self, task_id: str) -> TaskDetail:
        """``GET /tasks/{id}``."""
        doc = await self._json("GET", f"/tasks/{seg(task_id)}")
        return self._parse(TaskDetail, doc, "GET /tasks/{id}")

    # -- dependencies and assignments ---------------------------------------------------------
    async def add_dependency(
        self, task_id: str, depends_on_task_id: str, *, idempotency_key: str | None = None
    ) -> None:
        """``POST /tasks/{id}/dependencies``."""
        await self._call(
            "POST",
            f"/tasks/{seg(task_id)}/dependencies",
            body={"depends_on_task_id": depends_on_task_id},
            idempotency_key=self._key(idempotency_key),
        )

    async def list_dependencies(self, task_id: str) -> list[Dependency]:
        """``GET /tasks/{id}/dependencies``."""
        doc = await self._json("GET", f"/tasks/{seg(task_id)}/dependencies")
        return self._parse(_DEPENDENCIES, doc, "GET /tasks/{id}/dependencies")

    async def assign(
        self,
        task_id: str,
        agent_id: str,
        *,
        assigned_by: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        """``POST /tasks/{id}/assignments``."""
        body: dict[str, Any] = {"agent_id": agent_id}
        if assigned_by is not None:
            body["assigned_by"] = assigned_by
        await self._call(
            "POST",
            f"/tasks/{seg(task_id)}/assignments",
            body=body,
            idempotency_key=self._key(idempotency_key),
        )

    async def list_assignments(self, task_id: str) -> list[Assignment]:
        """``GET /tasks/{id}/assignments``."""
        doc = await self._json("GET", f"/tasks/{seg(task_id)}/assignments")
        return self._parse(_ASSIGNMENTS, doc, "GET /tasks/{id}/assignments")

    async def unassign(
        self, task_id: str, agent_id: str, *, idempotency_key: str | None = None
    ) -> None:
        """``DELETE /tasks/{id}/assignments/{agent_id}``."""
        await self._call(
            "DELETE",
            f"/tasks/{seg(task_id)}/assignments/{seg(agent_id)}",
            idempotency_key=self._key(idempotency_key),
        )

    # -- artifacts ----------------------------------------------------------------------------
    async def add_artifact(
        self, artifact: ArtifactCreate, *, idempotency_key: str | None = None
    ) -> str:
        """``POST /artifacts``. A 500 is checked against the ids before being retried.

        NullTickets answers 500 (not 404) for an unknown ``task_id``/``run_id``; retrying would
        only burn the retry budget, so the ids are checked first and an unknown one is reported
        as ``NotFound``.
        """
        check_json(artifact.meta, "artifact meta")
        body = artifact.model_dump(mode="json", exclude_none=True)
        key = self._key(idempotency_key)
        try:
            doc = await self._json(
                "POST", "/artifacts", body=body, idempotency_key=key, retry=False
            )
        except TrackerUnavailable as exc:
            if exc.code in ("internal_error", "server_error"):
                await self._check_artifact_refs(artifact, exc)
            doc = await self._json("POST", "/artifacts", body=body, idempotency_key=key)
        return self._id(doc, "POST /artifacts")

    async def _check_artifact_refs(self, artifact: ArtifactCreate, exc: Exception) -> None:
        detail: TaskDetail | None = None
        if artifact.task_id is not None:
            try:
                detail = await self.get_task(artifact.task_id)
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

    async def list_artifacts(
        self,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Artifact]:
        """``GET /artifacts``; cursor rebuilt from the last item."""
        self._check_limit(limit, "list_artifacts")
        query = encode_query(
            {"task_id": task_id, "run_id": run_id, "limit": limit, "cursor": cursor}
        )
        doc = await self._json("GET", f"/artifacts?{query}")
        page = self._parse(_ARTIFACT_PAGE, doc, "GET /artifacts")
        return Page[Artifact](items=page.items, next_cursor=item_cursor(page, "artifact"))

    # -- operations ---------------------------------------------------------------------------
    async def queue_stats(
        self, *, near_expiry_ms: int | None = 60_000, stuck_ms: int = 300_000
    ) -> QueueStats:
        """``GET /ops/queue``; ``near_expiry_ms=None`` sends a third of the default lease TTL
        (the API takes one window and doesn't expose each lease's TTL)."""
        if near_expiry_ms is None:
            near_expiry_ms = DEFAULT_LEASE_TTL_MS // 3
        query = encode_query({"near_expiry_ms": near_expiry_ms, "stuck_ms": stuck_ms})
        return self._parse(
            QueueStats, await self._json("GET", f"/ops/queue?{query}"), "GET /ops/queue"
        )

    # -- KV store -----------------------------------------------------------------------------
    async def store_put(self, namespace: str, key: str, value: Any) -> None:
        """``PUT /store/{ns}/{key}`` (an upsert; no idempotency key needed)."""
        check_json(value, f"store value {namespace}/{key}")
        await self._call("PUT", f"/store/{seg(namespace)}/{seg(key)}", body={"value": value})

    async def store_get(self, namespace: str, key: str) -> StoreEntry:
        """``GET /store/{ns}/{key}``."""
        doc = await self._json("GET", f"/store/{seg(namespace)}/{seg(key)}")
        return self._parse(StoreEntry, doc, "GET /store/{ns}/{key}")

    async def store_delete(self, namespace: str, key: str) -> None:
        """``DELETE /store/{ns}/{key}``."""
        await self._call("DELETE", f"/store/{seg(namespace)}/{seg(key)}")

    async def store_list(self, namespace: str) -> list[StoreEntry]:
        """``GET /store/{ns}``."""
        doc = await self._json("GET", f"/store/{seg(namespace)}")
        return self._parse(_STORE_ENTRIES, doc, "GET /store/{ns}")

    async def store_delete_namespace(self, namespace: str) -> None:
        """``DELETE /store/{ns}``."""
        await self._call("DELETE", f"/store/{seg(namespace)}")

    async def store_search(
        self,
        query: str,
        *,
        namespace: str | None = None,
        limit: int = 10,
        filter_path: str | None = None,
        filter_value: str | None = None,
    ) -> list[StoreEntry]:
        """``GET /store/search``."""
        self._check_limit(limit, "store_search")
        qs = encode_query(
            {
                "q": query,
                "namespace": namespace,
                "limit": limit,
                "filter_path": filter_path,
                "filter_value": filter_value,
            }
        )
        doc = await self._json("GET", f"/store/search?{qs}")
        return self._parse(_STORE_ENTRIES, doc, "GET /store/search")

    # -- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _id(doc: Any, what: str) -> str:
        value = doc.get("id") if isinstance(doc, dict) else None
        if not isinstance(value, str) or not value:
            raise TrackerUnavailable(f"{what}: answer without an 'id'", code="invalid_response")
        return value
