"""Route handlers of the served tracker: health, pipelines, tasks, leases, runs, artifacts.

Each handler is named after its operation in the wire contract
(:data:`tracker_client.contract.table.OPERATIONS`), which gives its method, path, auth
and body model; it parses its input (``400 invalid_json`` naming the field), calls the tracker
and answers the NullTickets JSON shape. Tracker errors become statuses through the error table
(:mod:`tracker_client.contract.wire_errors`). The store and extension handlers are in
:mod:`tracker_client.serve.extra_routes`; operations whose row says all (list pipelines,
dependencies, assignments, queue figures, the lease writes of a run: events, transition, fail,
release) have no handler and are served by :mod:`tracker_client.serve.generic`; the
application that routes to all is :mod:`tracker_client.serve.app`.

They may touch the request, the tracker of the request (through the ``Tracker`` protocol; a lease
route's lease is checked first by :mod:`~tracker_client.serve.helpers`) and the wire contract; never
the storage directly.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from tracker_client.agent_models import MAX_CHECKPOINT_BYTES, UNSET
from tracker_client.contract import table as c
from tracker_client.contract import wire_models as w
from tracker_client.models import ArtifactCreate, TaskCreate
from tracker_client.serve.helpers import (
    dump,
    idem_key,
    lease_handle,
    lease_json,
    limit_query,
    page_json,
    tracker_of,
)
from tracker_client.serve.http import (
    Handlers,
    json_response,
    no_content,
    raw_json_response,
    read_model,
)
from tracker_client.serve.openapi import openapi_document

__all__ = ["HANDLERS", "HEARTBEAT_MAX_BYTES"]

#: Largest heartbeat body read: 4 KiB (``{"lease_ttl_ms": N, "run_id": "..."}`` is under 100
#: bytes) plus a checkpoint of at most 64 KiB as compact JSON (what the client sends); a larger
#: body gets 413 unread (docs/operate/security.md).
HEARTBEAT_MAX_BYTES = 4096 + MAX_CHECKPOINT_BYTES

#: This module's handlers by operation name.
HANDLERS = Handlers()


# -- health and discovery -------------------------------------------------------------------------
@HANDLERS
async def health(request: Request) -> Response:
    """Liveness, stage census, and what this server offers beyond NullTickets: the extensions
    of the table that the tracker served declares (a rail still being built lacks some)."""
    tracker = tracker_of(request)
    doc = dump(await tracker.health())
    have = (await tracker.capabilities()).extensions
    doc["extensions"] = [name for name in c.EXTENSIONS if name in have]
    doc["limits"] = {"max_request_bytes": request.app.state.max_request_bytes}
    return json_response(doc)


@HANDLERS
async def openapi(request: Request) -> Response:
    """This server's OpenAPI document."""
    return json_response(openapi_document())


HANDLERS["openapi_well_known"] = openapi


# -- tasks ----------------------------------------------------------------------------------------
@HANDLERS
async def create_task(request: Request) -> Response:
    """``POST /tasks``: create task."""
    body = await read_model(request, TaskCreate)
    tid = await tracker_of(request).create_task(body, idempotency_key=idem_key(request))
    return json_response({"id": tid}, 201)


@HANDLERS
async def create_tasks(request: Request) -> Response:
    """``POST /tasks/bulk``: create tasks, all or nothing."""
    body = await read_model(request, w.BulkBody)
    ids = await tracker_of(request).create_tasks(body.tasks, idempotency_key=idem_key(request))
    return json_response({"ids": ids}, 201)


@HANDLERS
async def list_tasks(request: Request) -> Response:
    """``GET /tasks``: list tasks (cursor = last item, never skips)."""
    q = request.query_params
    page = await tracker_of(request).list_tasks(
        stage=q.get("stage"),
        pipeline_id=q.get("pipeline_id"),
        limit=limit_query(request, 50),
        cursor=q.get("cursor"),
    )
    return json_response(page_json(page))


@HANDLERS
async def get_task(request: Request) -> Response:
    """``GET /tasks/{task_id}``: get task with latest run and relations. ``latest_run`` is absent,
    not null, before the first claim (as NullTickets answers)."""
    detail = dump(await tracker_of(request).get_task(request.path_params["task_id"]))
    if detail.get("latest_run") is None:
        detail.pop("latest_run", None)  # absent, not null, as NullTickets answers
    return json_response(detail)


@HANDLERS
async def add_dependency(request: Request) -> Response:
    """``POST /tasks/{task_id}/dependencies``: add dependency (cycles refused)."""
    body = await read_model(request, w.DependencyBody)
    await tracker_of(request).add_dependency(
        request.path_params["task_id"], body.depends_on_task_id, idempotency_key=idem_key(request)
    )
    return json_response({"status": "created"}, 201)


@HANDLERS
async def assign(request: Request) -> Response:
    """``POST /tasks/{task_id}/assignments``: assign task."""
    body = await read_model(request, w.AssignBody)
    await tracker_of(request).assign(
        request.path_params["task_id"],
        body.agent_id,
        assigned_by=body.assigned_by,
        idempotency_key=idem_key(request),
    )
    return json_response({"status": "assigned"}, 201)


@HANDLERS
async def unassign(request: Request) -> Response:
    """``DELETE /tasks/{task_id}/assignments/{agent_id}``: unassign."""
    await tracker_of(request).unassign(
        request.path_params["task_id"],
        request.path_params["agent_id"],
        idempotency_key=idem_key(request),
    )
    return json_response({"status": "unassigned"})


# -- leases and runs ------------------------------------------------------------------------------
@HANDLERS
async def claim(request: Request) -> Response:
    """``POST /leases/claim``: claim the best eligible task; ``204`` with no body: no work.
    ``concurrency.per_state`` is read as NullTickets reads it."""
    body = await read_model(request, w.ClaimBody)
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
        return no_content()
    return raw_json_response(lease_json(lease))


@HANDLERS
async def heartbeat(request: Request) -> Response:
    # A heartbeat's body is a few bytes: a larger one is refused before it is read.
    """``POST /leases/{lease_id}/heartbeat``: extend the lease by its own TTL (and write the run's
    ``checkpoint`` when the body has one). A body over 68 KiB is refused before it is read."""
    body = await read_model(request, w.HeartbeatBody, required=False, limit=HEARTBEAT_MAX_BYTES)
    lease = lease_handle(request, lease_id=request.path_params["lease_id"], run_id=body.run_id)
    checkpoint = body.checkpoint if "checkpoint" in body.model_fields_set else UNSET
    expires = await tracker_of(request).heartbeat(
        lease, lease_ttl_ms=body.lease_ttl_ms, checkpoint=checkpoint
    )
    return json_response({"expires_at_ms": expires})


@HANDLERS
async def list_events(request: Request) -> Response:
    """``GET /runs/{run_id}/events``: list run events. Admin token (NullTickets lets any Bearer
    read events)."""
    page = await tracker_of(request).list_events(
        request.path_params["run_id"],
        limit=limit_query(request, 100),
        cursor=request.query_params.get("cursor"),
    )
    return json_response(page_json(page))


# -- artifacts, ops -------------------------------------------------------------------------------
@HANDLERS
async def add_artifact(request: Request) -> Response:
    """``POST /artifacts``: add artifact."""
    body = await read_model(request, ArtifactCreate)
    aid = await tracker_of(request).add_artifact(body, idempotency_key=idem_key(request))
    return json_response({"id": aid}, 201)


@HANDLERS
async def list_artifacts(request: Request) -> Response:
    """``GET /artifacts``: list artifacts."""
    q = request.query_params
    page = await tracker_of(request).list_artifacts(
        task_id=q.get("task_id"),
        run_id=q.get("run_id"),
        limit=limit_query(request, 100),
        cursor=q.get("cursor"),
    )
    return json_response(page_json(page))
