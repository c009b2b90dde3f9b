"""Route handlers of the served tracker: the NullTickets routes, and the route table.

Each handler parses its input (``400 invalid_json`` naming the field), calls the tracker and
answers the NullTickets JSON shape. Tracker errors become statuses in
:func:`tracker_client.serve.app.tracker_error_response`. The store and extension handlers are in
:mod:`tracker_client.serve.extra_routes`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tracker_client.models import ArtifactCreate, TaskCreate
from tracker_client.serve.app import EXTENSIONS, endpoint, json_response, parse_model, read_body
from tracker_client.serve.extra_routes import (
    cancel,
    cancel_all,
    list_runs,
    list_task_events,
    maintenance,
    requeue,
    store_delete,
    store_delete_namespace,
    store_get,
    store_list,
    store_put,
    store_search,
    wait,
    wait_for_work,
)
from tracker_client.serve.helpers import (
    checked_lease,
    dump,
    idem_key,
    int_query,
    lease_handle,
    limit_query,
    page_json,
    tracker_of,
)

__all__ = ["HEARTBEAT_MAX_BYTES", "ROUTES"]

#: Largest heartbeat body read (``{"lease_ttl_ms": N, "run_id": "..."}`` is under 100 bytes).
HEARTBEAT_MAX_BYTES = 4096


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PipelineBody(_Body):
    name: str
    definition: Any


class BulkBody(_Body):
    tasks: list[TaskCreate]


class DependencyBody(_Body):
    depends_on_task_id: str


class AssignBody(_Body):
    agent_id: str
    assigned_by: str | None = None


class ClaimBody(_Body):
    agent_id: str
    agent_role: str
    lease_ttl_ms: int = 300_000
    concurrency: dict[str, Any] | None = None


class HeartbeatBody(_Body):
    lease_ttl_ms: int | None = None
    #: Extension: the lease's run, used only to say why a lease is gone (revoked, expired).
    run_id: str = ""


class EventBody(_Body):
    kind: str
    data: Any = Field(default_factory=dict)


class TransitionBody(_Body):
    trigger: str
    instructions: str | None = None
    usage: Any = None
    expected_stage: str | None = None
    expected_task_version: int | None = None


class FailBody(_Body):
    error: str
    usage: Any = None
    retryable: bool = True


class ReleaseBody(_Body):
    reason: str = "worker_shutdown"


# -- health and discovery -------------------------------------------------------------------------
@endpoint
async def health(request: Request) -> Response:
    """Liveness, stage census, and what this server offers beyond NullTickets."""
    doc = dump(await tracker_of(request).health())
    doc["extensions"] = list(EXTENSIONS)
    doc["limits"] = {"max_request_bytes": request.app.state.max_request_bytes}
    return json_response(doc)


@endpoint
async def openapi(request: Request) -> Response:
    """This server's OpenAPI document."""
    from tracker_client.serve.openapi import openapi_document

    return json_response(openapi_document())


# -- pipelines ------------------------------------------------------------------------------------
@endpoint
async def create_pipeline(request: Request) -> Response:
    body = parse_model(PipelineBody, await read_body(request))
    pid = await tracker_of(request).create_pipeline(
        body.name, body.definition, idempotency_key=idem_key(request)
    )
    return json_response({"id": pid}, 201)


@endpoint
async def list_pipelines(request: Request) -> Response:
    return json_response([dump(p) for p in await tracker_of(request).list_pipelines()])


@endpoint
async def get_pipeline(request: Request) -> Response:
    return json_response(dump(await tracker_of(request).get_pipeline(request.path_params["id"])))


# -- tasks ----------------------------------------------------------------------------------------
@endpoint
async def create_task(request: Request) -> Response:
    body = parse_model(TaskCreate, await read_body(request))
    tid = await tracker_of(request).create_task(body, idempotency_key=idem_key(request))
    return json_response({"id": tid}, 201)


@endpoint
async def create_tasks(request: Request) -> Response:
    body = parse_model(BulkBody, await read_body(request))
    ids = await tracker_of(request).create_tasks(body.tasks, idempotency_key=idem_key(request))
    return json_response({"ids": ids}, 201)


@endpoint
async def list_tasks(request: Request) -> Response:
    q = request.query_params
    page = await tracker_of(request).list_tasks(
        stage=q.get("stage"),
        pipeline_id=q.get("pipeline_id"),
        limit=limit_query(request, 50),
        cursor=q.get("cursor"),
    )
    return json_response(page_json(page))


@endpoint
async def get_task(request: Request) -> Response:
    detail = dump(await tracker_of(request).get_task(request.path_params["id"]))
    if detail.get("latest_run") is None:
        detail.pop("latest_run", None)  # absent, not null, as NullTickets answers
    return json_response(detail)


@endpoint
async def add_dependency(request: Request) -> Response:
    body = parse_model(DependencyBody, await read_body(request))
    await tracker_of(request).add_dependency(
        request.path_params["id"], body.depends_on_task_id, idempotency_key=idem_key(request)
    )
    return json_response({"status": "created"}, 201)


@endpoint
async def list_dependencies(request: Request) -> Response:
    deps = await tracker_of(request).list_dependencies(request.path_params["id"])
    return json_response([dump(d) for d in deps])


@endpoint
async def assign(request: Request) -> Response:
    body = parse_model(AssignBody, await read_body(request))
    await tracker_of(request).assign(
        request.path_params["id"],
        body.agent_id,
        assigned_by=body.assigned_by,
        idempotency_key=idem_key(request),
    )
    return json_response({"status": "assigned"}, 201)


@endpoint
async def list_assignments(request: Request) -> Response:
    found = await tracker_of(request).list_assignments(request.path_params["id"])
    return json_response([dump(a) for a in found])


@endpoint
async def unassign(request: Request) -> Response:
    await tracker_of(request).unassign(
        request.path_params["id"],
        request.path_params["agent_id"],
        idempotency_key=idem_key(request),
    )
    return json_response({"status": "unassigned"})


# -- leases and runs ------------------------------------------------------------------------------
@endpoint
async def claim(request: Request) -> Response:
    body = parse_model(ClaimBody, await read_body(request))
    raw = (body.concurrency or {}).get("per_state")
    per_state: dict[str, int] = {}
    if isinstance(raw, dict):
        # As NullTickets: only numbers > 0 count (floats truncated); anything else is no limit.
        for stage, value in raw.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and int(value) > 0:
                per_state[str(stage)] = int(value)
    lease = await tracker_of(request).claim(
        body.agent_id,
        body.agent_role,
        body.lease_ttl_ms,
        per_state=per_state or None,
        idempotency_key=idem_key(request),
    )
    if lease is None:
        return Response(status_code=204, media_type="application/json")
    doc = dump(lease)
    doc["lease_token"] = lease.lease_token.get_secret_value()
    return json_response(doc)


@endpoint
async def heartbeat(request: Request) -> Response:
    # A heartbeat's body is a few bytes: a larger one is refused before it is read.
    doc = await read_body(request, required=False, limit=HEARTBEAT_MAX_BYTES)
    body = parse_model(HeartbeatBody, doc if doc is not None else {})
    lease = lease_handle(request, lease_id=request.path_params["id"], run_id=body.run_id)
    expires = await tracker_of(request).heartbeat(lease, lease_ttl_ms=body.lease_ttl_ms)
    return json_response({"expires_at_ms": expires})


@endpoint
async def add_event(request: Request) -> Response:
    lease = await checked_lease(request, request.path_params["id"], "add_event")
    body = parse_model(EventBody, await read_body(request))
    event_id = await tracker_of(request).add_event(
        lease, body.kind, body.data, idempotency_key=idem_key(request)
    )
    return json_response({"id": event_id}, 201)


@endpoint
async def list_events(request: Request) -> Response:
    page = await tracker_of(request).list_events(
        request.path_params["id"],
        limit=limit_query(request, 100),
        cursor=request.query_params.get("cursor"),
    )
    return json_response(page_json(page))


@endpoint
async def transition(request: Request) -> Response:
    lease = await checked_lease(request, request.path_params["id"], "transition")
    body = parse_model(TransitionBody, await read_body(request))
    result = await tracker_of(request).transition(
        lease,
        body.trigger,
        expected_stage=body.expected_stage,
        expected_task_version=body.expected_task_version,
        instructions=body.instructions,
        usage=body.usage,
        idempotency_key=idem_key(request),
    )
    return json_response(dump(result))


@endpoint
async def fail(request: Request) -> Response:
    lease = await checked_lease(request, request.path_params["id"], "fail")
    body = parse_model(FailBody, await read_body(request))
    result = await tracker_of(request).fail(
        lease,
        body.error,
        usage=body.usage,
        retryable=body.retryable,
        idempotency_key=idem_key(request),
    )
    return json_response(dump(result))


@endpoint
async def release(request: Request) -> Response:
    """Extension: give an unfinished run's task back without counting an attempt."""
    lease = await checked_lease(request, request.path_params["id"], "release")
    body = parse_model(ReleaseBody, await read_body(request))
    result = await tracker_of(request).release(
        lease, body.reason, idempotency_key=idem_key(request)
    )
    return json_response(dump(result))


# -- artifacts, ops -------------------------------------------------------------------------------
@endpoint
async def add_artifact(request: Request) -> Response:
    body = parse_model(ArtifactCreate, await read_body(request))
    aid = await tracker_of(request).add_artifact(body, idempotency_key=idem_key(request))
    return json_response({"id": aid}, 201)


@endpoint
async def list_artifacts(request: Request) -> Response:
    q = request.query_params
    page = await tracker_of(request).list_artifacts(
        task_id=q.get("task_id"),
        run_id=q.get("run_id"),
        limit=limit_query(request, 100),
        cursor=q.get("cursor"),
    )
    return json_response(page_json(page))


@endpoint
async def queue_stats(request: Request) -> Response:
    stats = await tracker_of(request).queue_stats(
        near_expiry_ms=int_query(request, "near_expiry_ms", 60_000),
        stuck_ms=int_query(request, "stuck_ms", 300_000),
    )
    return json_response(dump(stats))


ROUTES = [
    Route("/health", health, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/.well-known/openapi.json", openapi, methods=["GET"]),
    Route("/pipelines", create_pipeline, methods=["POST"]),
    Route("/pipelines", list_pipelines, methods=["GET"]),
    Route("/pipelines/{id}", get_pipeline, methods=["GET"]),
    Route("/tasks/bulk", create_tasks, methods=["POST"]),
    Route("/tasks", create_task, methods=["POST"]),
    Route("/tasks", list_tasks, methods=["GET"]),
    Route("/tasks/{id}", get_task, methods=["GET"]),
    Route("/tasks/{id}/dependencies", add_dependency, methods=["POST"]),
    Route("/tasks/{id}/dependencies", list_dependencies, methods=["GET"]),
    Route("/tasks/{id}/assignments", assign, methods=["POST"]),
    Route("/tasks/{id}/assignments", list_assignments, methods=["GET"]),
    Route("/tasks/{id}/assignments/{agent_id}", unassign, methods=["DELETE"]),
    Route("/leases/claim", claim, methods=["POST"]),
    Route("/leases/{id}/heartbeat", heartbeat, methods=["POST"]),
    Route("/runs/{id}/events", add_event, methods=["POST"]),
    Route("/runs/{id}/events", list_events, methods=["GET"]),
    Route("/runs/{id}/transition", transition, methods=["POST"]),
    Route("/runs/{id}/fail", fail, methods=["POST"]),
    Route("/runs/{id}/release", release, methods=["POST"]),
    Route("/artifacts", add_artifact, methods=["POST"]),
    Route("/artifacts", list_artifacts, methods=["GET"]),
    Route("/ops/queue", queue_stats, methods=["GET"]),
    Route("/store/search", store_search, methods=["GET"]),
    Route("/store/{namespace}/{key:path}", store_put, methods=["PUT"]),
    Route("/store/{namespace}/{key:path}", store_get, methods=["GET"]),
    Route("/store/{namespace}/{key:path}", store_delete, methods=["DELETE"]),
    Route("/store/{namespace}", store_list, methods=["GET"]),
    Route("/store/{namespace}", store_delete_namespace, methods=["DELETE"]),
    # extensions (advertised in /health "extensions")
    Route("/tasks/{id}/cancel", cancel, methods=["POST"]),
    Route("/tasks/{id}/requeue", requeue, methods=["POST"]),
    Route("/tasks/{id}/wait", wait, methods=["GET"]),
    Route("/tasks/{id}/runs", list_runs, methods=["GET"]),
    Route("/tasks/{id}/events", list_task_events, methods=["GET"]),
    Route("/ops/cancel-all", cancel_all, methods=["POST"]),
    Route("/ops/maintenance", maintenance, methods=["POST"]),
    Route("/ops/wait-for-work", wait_for_work, methods=["GET"]),
]
