"""Route handlers of the served tracker beyond tasks and leases: the KV store and the extension
routes (cancel, requeue, cancel-all, maintenance, wait, every run, task events)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import Response

from tracker_client.serve.app import ApiError, endpoint, json_response, parse_model, read_body
from tracker_client.serve.helpers import (
    dump,
    int_query,
    limit_query,
    page_json,
    store_path,
    tracker_of,
    until_closing,
)

__all__ = [
    "cancel",
    "cancel_all",
    "list_runs",
    "list_task_events",
    "maintenance",
    "requeue",
    "store_delete",
    "store_delete_namespace",
    "store_get",
    "store_list",
    "store_put",
    "store_search",
    "wait",
    "wait_for_work",
]

#: Longest single ``GET /tasks/{id}/wait`` (the client loops for longer waits).
MAX_WAIT_MS = 60_000


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StoreBody(_Body):
    value: Any


class CancelBody(_Body):
    reason: str = "cancelled"


class CancelAllBody(_Body):
    pipeline_id: str | None = None
    role: str | None = None


class RequeueBody(_Body):
    stage: str | None = None
    reset_attempts: bool = True


# -- store ----------------------------------------------------------------------------------------
@endpoint
async def store_put(request: Request) -> Response:
    body = parse_model(StoreBody, await read_body(request))
    namespace, key = store_path(request)
    await tracker_of(request).store_put(namespace, key, body.value)
    return Response(status_code=204, media_type="application/json")


@endpoint
async def store_get(request: Request) -> Response:
    namespace, key = store_path(request)
    return json_response(dump(await tracker_of(request).store_get(namespace, key)))


@endpoint
async def store_delete(request: Request) -> Response:
    namespace, key = store_path(request)
    await tracker_of(request).store_delete(namespace, key)
    return Response(status_code=204, media_type="application/json")


@endpoint
async def store_list(request: Request) -> Response:
    entries = await tracker_of(request).store_list(request.path_params["namespace"])
    return json_response([dump(e) for e in entries])


@endpoint
async def store_delete_namespace(request: Request) -> Response:
    await tracker_of(request).store_delete_namespace(request.path_params["namespace"])
    return Response(status_code=204, media_type="application/json")


@endpoint
async def store_search(request: Request) -> Response:
    q = request.query_params
    if "q" not in q:
        raise ApiError(400, "missing_param", "query parameter q is required")
    found = await tracker_of(request).store_search(
        q["q"],
        namespace=q.get("namespace"),
        limit=limit_query(request, 10),
        filter_path=q.get("filter_path"),
        filter_value=q.get("filter_value"),
    )
    return json_response([dump(e) for e in found])


# -- extensions -----------------------------------------------------------------------------------
@endpoint
async def cancel(request: Request) -> Response:
    doc = await read_body(request, required=False)
    body = parse_model(CancelBody, doc if doc is not None else {})
    result = await tracker_of(request).cancel(request.path_params["id"], reason=body.reason)
    return json_response(dump(result))


@endpoint
async def requeue(request: Request) -> Response:
    doc = await read_body(request, required=False)
    body = parse_model(RequeueBody, doc if doc is not None else {})
    result = await tracker_of(request).requeue(
        request.path_params["id"], stage=body.stage, reset_attempts=body.reset_attempts
    )
    return json_response(dump(result))


@endpoint
async def cancel_all(request: Request) -> Response:
    body = parse_model(CancelAllBody, await read_body(request))
    count = await tracker_of(request).cancel_all(pipeline_id=body.pipeline_id, role=body.role)
    request.state.changed = count > 0
    return json_response({"cancelled": count})


@endpoint
async def maintenance(request: Request) -> Response:
    """Reclaim expired leases and the like. A pass that changed nothing (what idle workers'
    periodic passes mostly are) wakes no waiter: each wake-up costs every worker a claim."""
    report = await tracker_of(request).maintenance()
    request.state.changed = bool(
        report.expired_leases or report.expired_tasks or report.crash_looped
    )
    return json_response(dump(report))


@endpoint
async def wait(request: Request) -> Response:
    timeout_ms = int_query(request, "timeout_ms", 30_000)
    if not 0 <= timeout_ms <= MAX_WAIT_MS:
        raise ApiError(400, "invalid_request", f"timeout_ms must be 0..{MAX_WAIT_MS}")
    tracker, task_id = tracker_of(request), request.path_params["id"]
    result = await until_closing(
        request, lambda: tracker.wait(task_id, timeout_s=timeout_ms / 1000)
    )
    if result is None:  # the server is stopping: answer with the state as it is now
        result = await tracker.wait(task_id, timeout_s=0)
    return json_response(dump(result))


@endpoint
async def wait_for_work(request: Request) -> Response:
    """Long-poll until the rail may have new work, or ``timeout_ms`` (max 60000).

    ``since`` (the ``X-Rail-Generation`` the client last saw) returns at once when a write was
    served after it, closing the race between a write and the start of this wait.
    """
    timeout_ms = int_query(request, "timeout_ms", 30_000)
    if not 0 <= timeout_ms <= MAX_WAIT_MS:
        raise ApiError(400, "invalid_request", f"timeout_ms must be 0..{MAX_WAIT_MS}")
    state = request.app.state
    since = request.query_params.get("since")
    if since is not None and since != f"{state.boot_id}:{state.generation}":
        # Something was written since the client last looked (or the server restarted).
        return json_response({"status": "changed"})
    tracker = tracker_of(request)
    await until_closing(request, lambda: tracker.wait_for_work(timeout_ms / 1000))
    return json_response({"status": "ok"})


@endpoint
async def list_runs(request: Request) -> Response:
    runs = await tracker_of(request).list_runs(request.path_params["id"])
    return json_response([dump(r) for r in runs])


@endpoint
async def list_task_events(request: Request) -> Response:
    page = await tracker_of(request).list_task_events(
        request.path_params["id"],
        limit=limit_query(request, 100),
        cursor=request.query_params.get("cursor"),
        kind=request.query_params.get("kind"),
    )
    return json_response(page_json(page))
