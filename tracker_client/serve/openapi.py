"""The OpenAPI 3.1 document of the served tracker (``GET /openapi.json``).

The operation table below is written by hand, next to (not generated from) the route table, and
a test checks that both list the same (method, path) pairs. Object schemas come from the pydantic
models, so the shapes cannot drift from what the server dumps.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tracker_client import models

__all__ = ["OPERATIONS", "QUERY_PARAMS", "openapi_document"]

# (method, path, summary, auth, request body schema, success status, response schema, errors)
# auth: "public" | "admin" | "lease". Schemas are component names, "[X]" for an array of X,
# "PageX" for {"items":[X],"next_cursor"}, or None.
OPERATIONS: list[tuple[str, str, str, str, str | None, int, str | None, tuple[int, ...]]] = [
    (
        "get",
        "/health",
        "Health, stage census, extensions and limits",
        "public",
        None,
        200,
        "Health",
        (),
    ),
    ("get", "/openapi.json", "This document", "public", None, 200, None, ()),
    (
        "get",
        "/.well-known/openapi.json",
        "This document (well-known)",
        "public",
        None,
        200,
        None,
        (),
    ),
    ("post", "/pipelines", "Create pipeline", "admin", "PipelineCreate", 201, "Id", (400, 409)),
    ("get", "/pipelines", "List pipelines, newest first", "admin", None, 200, "[Pipeline]", ()),
    ("get", "/pipelines/{id}", "Get pipeline", "admin", None, 200, "Pipeline", (404,)),
    ("post", "/tasks", "Create task", "admin", "TaskCreate", 201, "Id", (400, 404, 409, 429)),
    (
        "post",
        "/tasks/bulk",
        "Create tasks, all or nothing",
        "admin",
        "BulkCreate",
        201,
        "Ids",
        (400, 404, 409, 429),
    ),
    (
        "get",
        "/tasks",
        "List tasks (cursor = last item, never skips)",
        "admin",
        None,
        200,
        "PageTask",
        (400,),
    ),
    (
        "get",
        "/tasks/{id}",
        "Get task with latest run and relations",
        "admin",
        None,
        200,
        "TaskDetail",
        (404,),
    ),
    (
        "post",
        "/tasks/{id}/dependencies",
        "Add dependency (cycles refused)",
        "admin",
        "DependencyCreate",
        201,
        "Status",
        (400, 404, 409),
    ),
    (
        "get",
        "/tasks/{id}/dependencies",
        "List dependencies",
        "admin",
        None,
        200,
        "[Dependency]",
        (),
    ),
    (
        "post",
        "/tasks/{id}/assignments",
        "Assign task",
        "admin",
        "AssignmentCreate",
        201,
        "Status",
        (400, 404),
    ),
    ("get", "/tasks/{id}/assignments", "List assignments", "admin", None, 200, "[Assignment]", ()),
    (
        "delete",
        "/tasks/{id}/assignments/{agent_id}",
        "Unassign",
        "admin",
        None,
        200,
        "Status",
        (404,),
    ),
    (
        "post",
        "/leases/claim",
        "Claim the best eligible task (204: no work)",
        "admin",
        "Claim",
        200,
        "Lease",
        (400,),
    ),
    (
        "post",
        "/leases/{id}/heartbeat",
        "Extend the lease by its own TTL",
        "lease",
        "Heartbeat",
        200,
        "Expiry",
        (401, 404, 410),
    ),
    (
        "post",
        "/runs/{id}/events",
        "Add run event",
        "lease",
        "EventCreate",
        201,
        "IntId",
        (400, 401, 404, 410),
    ),
    ("get", "/runs/{id}/events", "List run events", "admin", None, 200, "PageEvent", (400,)),
    (
        "post",
        "/runs/{id}/transition",
        "Complete the run and move the task",
        "lease",
        "TransitionRequest",
        200,
        "TransitionResult",
        (400, 401, 404, 409, 410),
    ),
    (
        "post",
        "/runs/{id}/fail",
        "Fail the run (retry or dead letter)",
        "lease",
        "FailRequest",
        200,
        "FailResult",
        (400, 401, 404, 410),
    ),
    (
        "post",
        "/runs/{id}/release",
        "Give an unfinished run's task back (worker shutdown): no attempt counted",
        "lease",
        "ReleaseRequest",
        200,
        "ReleaseResult",
        (400, 401, 404, 410),
    ),
    ("post", "/artifacts", "Add artifact", "admin", "ArtifactCreate", 201, "Id", (400, 404)),
    ("get", "/artifacts", "List artifacts", "admin", None, 200, "PageArtifact", (400,)),
    ("get", "/ops/queue", "Per-role queue figures", "admin", None, 200, "QueueStats", ()),
    (
        "get",
        "/store/search",
        "Full-text search of the store",
        "admin",
        None,
        200,
        "[StoreEntry]",
        (400,),
    ),
    (
        "put",
        "/store/{namespace}/{key}",
        "Upsert a value (204)",
        "admin",
        "StorePut",
        204,
        None,
        (400,),
    ),
    ("get", "/store/{namespace}/{key}", "Get a value", "admin", None, 200, "StoreEntry", (404,)),
    ("delete", "/store/{namespace}/{key}", "Delete a key (204)", "admin", None, 204, None, ()),
    ("get", "/store/{namespace}", "List a namespace", "admin", None, 200, "[StoreEntry]", ()),
    ("delete", "/store/{namespace}", "Delete a namespace (204)", "admin", None, 204, None, ()),
    # extensions
    (
        "get",
        "/ops/wait-for-work",
        "Return when the rail may have new work, or after timeout_ms (max 60000)",
        "admin",
        None,
        200,
        "Status",
        (400,),
    ),
    (
        "post",
        "/tasks/{id}/cancel",
        "Cancel a waiting or running task (revokes its lease)",
        "admin",
        "CancelRequest",
        200,
        "CancelResult",
        (404, 409),
    ),
    (
        "post",
        "/tasks/{id}/requeue",
        "Requeue a dead-lettered or cancelled task",
        "admin",
        "RequeueRequest",
        200,
        "RequeueResult",
        (400, 404, 409),
    ),
    (
        "get",
        "/tasks/{id}/wait",
        "Wait up to timeout_ms (max 60000) for the task to finish",
        "admin",
        None,
        200,
        "WaitResult",
        (400, 404),
    ),
    ("get", "/tasks/{id}/runs", "Every run of the task", "admin", None, 200, "[Run]", (404,)),
    (
        "get",
        "/tasks/{id}/events",
        "Every event of the task",
        "admin",
        None,
        200,
        "PageEvent",
        (400, 404),
    ),
    (
        "post",
        "/ops/cancel-all",
        "Cancel every task of a pipeline and/or role",
        "admin",
        "CancelAllRequest",
        200,
        "CancelCount",
        (400,),
    ),
    (
        "post",
        "/ops/maintenance",
        "Reclaim expired leases, expire tasks, purge keys",
        "admin",
        None,
        200,
        "MaintenanceReport",
        (),
    ),
]

# Every model of the contract (the generic Page is spelled out per route instead).
_MODELS: list[type[BaseModel]] = [
    obj
    for name in models.__all__
    if isinstance(obj := getattr(models, name), type)
    and issubclass(obj, BaseModel)
    and obj is not models.Page
]


def _obj(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_ANY: dict[str, Any] = {}

_EXTRA_SCHEMAS: dict[str, Any] = {
    "Id": _obj(["id"], id=_STR),
    "Ids": _obj(["ids"], ids={"type": "array", "items": _STR}),
    "IntId": _obj(["id"], id=_INT),
    "Status": _obj(["status"], status=_STR),
    "Expiry": _obj(["expires_at_ms"], expires_at_ms=_INT),
    "CancelCount": _obj(["cancelled"], cancelled=_INT),
    "PipelineCreate": _obj(["name", "definition"], name=_STR, definition={"type": "object"}),
    "BulkCreate": _obj(
        ["tasks"], tasks={"type": "array", "items": {"$ref": "#/components/schemas/TaskCreate"}}
    ),
    "DependencyCreate": _obj(["depends_on_task_id"], depends_on_task_id=_STR),
    "AssignmentCreate": _obj(["agent_id"], agent_id=_STR, assigned_by=_STR),
    "Claim": _obj(
        ["agent_id", "agent_role"],
        agent_id=_STR,
        agent_role=_STR,
        lease_ttl_ms={"type": "integer", "minimum": 1, "maximum": 86_400_000},
        concurrency=_obj([], per_state={"type": "object", "additionalProperties": _INT}),
    ),
    "Heartbeat": _obj([], lease_ttl_ms=_INT),
    "EventCreate": _obj(["kind"], kind=_STR, data=_ANY),
    "TransitionRequest": _obj(
        ["trigger"],
        trigger=_STR,
        instructions=_STR,
        usage=_ANY,
        expected_stage=_STR,
        expected_task_version=_INT,
    ),
    "FailRequest": _obj(["error"], error=_STR, usage=_ANY, retryable={"type": "boolean"}),
    "ReleaseRequest": _obj([], reason=_STR),
    "StorePut": _obj(["value"], value=_ANY),
    "CancelRequest": _obj([], reason=_STR),
    "RequeueRequest": _obj([], stage=_STR, reset_attempts={"type": "boolean"}),
    "CancelAllRequest": _obj([], pipeline_id=_STR, role=_STR),
    "Error": _obj(
        ["error"],
        error=_obj(
            ["code", "message"],
            code=_STR,
            message=_STR,
            allowed={"type": "array", "items": _STR},
            role=_STR,
            depth=_INT,
            cap=_INT,
        ),
    ),
}


def _schema_ref(name: str) -> dict[str, Any]:
    if name.startswith("["):
        return {"type": "array", "items": _schema_ref(name[1:-1])}
    if name.startswith("Page"):
        return _obj(
            ["items", "next_cursor"],
            items={"type": "array", "items": _schema_ref(name[4:])},
            next_cursor={"type": ["string", "null"]},
        )
    return {"$ref": f"#/components/schemas/{name}"}


#: Query parameters per (method, path); all optional except ``q`` of the store search.
QUERY_PARAMS: dict[tuple[str, str], tuple[tuple[str, dict[str, Any]], ...]] = {
    ("get", "/tasks"): (("stage", _STR), ("pipeline_id", _STR), ("limit", _INT), ("cursor", _STR)),
    ("get", "/runs/{id}/events"): (("limit", _INT), ("cursor", _STR)),
    ("get", "/tasks/{id}/events"): (("limit", _INT), ("cursor", _STR), ("kind", _STR)),
    ("get", "/artifacts"): (
        ("task_id", _STR),
        ("run_id", _STR),
        ("limit", _INT),
        ("cursor", _STR),
    ),
    ("get", "/ops/queue"): (("near_expiry_ms", _INT), ("stuck_ms", _INT)),
    ("get", "/store/search"): (
        ("q", _STR),
        ("namespace", _STR),
        ("limit", _INT),
        ("filter_path", _STR),
        ("filter_value", _STR),
    ),
    ("get", "/tasks/{id}/wait"): (("timeout_ms", _INT),),
    ("get", "/ops/wait-for-work"): (("timeout_ms", _INT), ("since", _STR)),
}


def _params(method: str, path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    params = [{"name": n, "in": "path", "required": True, "schema": _STR} for n in names]
    for name, schema in QUERY_PARAMS.get((method, path), ()):
        params.append({"name": name, "in": "query", "required": name == "q", "schema": schema})
    return params


_ERROR_TEXT = {
    400: "Bad request (invalid_json, validation_failed, invalid_transition, ...)",
    401: "Missing or invalid token",
    404: "Not found (or the lease is gone, on lease routes)",
    409: "Conflict",
    410: "Lease expired or revoked",
    429: "Backlog of the role is full (Retry-After)",
}


@cache
def openapi_document() -> dict[str, Any]:
    """The document, built once."""
    _, defs = models_json_schema(
        [(m, "serialization") for m in _MODELS], ref_template="#/components/schemas/{model}"
    )
    schemas = {**defs.get("$defs", {}), **_EXTRA_SCHEMAS}
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, auth, body, status, response, errors in OPERATIONS:
        op: dict[str, Any] = {"summary": summary, "x-auth": auth}
        if auth != "public":
            op["security"] = [{"bearer": []}]
        if params := _params(method, path):
            op["parameters"] = params
        if body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": _schema_ref(body)}},
            }
        ok: dict[str, Any] = {"description": "OK"}
        if response is not None:
            ok["content"] = {"application/json": {"schema": _schema_ref(response)}}
        responses: dict[str, Any] = {str(status): ok}
        if path == "/leases/claim":
            responses["204"] = {"description": "No work"}
        for code in sorted({*errors, 500, 503} | ({401} if auth != "public" else set())):
            responses[str(code)] = {
                "description": _ERROR_TEXT.get(code, "Server error"),
                "content": {"application/json": {"schema": _schema_ref("Error")}},
            }
        op["responses"] = responses
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "backlog-worker served tracker (NullTickets API)",
            "version": "1",
            "description": (
                "The embedded tracker over the NullTickets HTTP API, with its traps fixed and "
                "extension routes. Admin routes take the api token, lease routes the lease token."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
