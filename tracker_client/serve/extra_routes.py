"""Route handlers of the served tracker beyond tasks and leases: the KV store's keyed routes and
search, and the extension routes that need more than their contract row (cancel-all and
maintenance say whether they changed anything, the long polls, the task events' ``limit``).
Extension operations a row says all about (cancel, requeue, every run) have no handler here:
:mod:`tracker_client.serve.generic` serves them.

Named after their operations in :data:`tracker_client.contract.table.OPERATIONS`, as in
:mod:`tracker_client.serve.routes`. Two quirks are handled here: a store key may hold ``/``
(read from the raw path, each segment decoded on its own:
:func:`~tracker_client.serve.helpers.store_path`), and a long poll ends when the server stops
or its client leaves (:func:`~tracker_client.serve.helpers.until_closing`).

They may touch the request, the tracker of the request (through the ``Tracker`` protocol) and the
wire contract; never the storage directly.
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from tracker_client.bounds import MAX_WAIT_MS
from tracker_client.contract import wire_models as w
from tracker_client.contract.batch_bodies import ParkedClaimBody
from tracker_client.models import Lease
from tracker_client.serve.helpers import (
    Closing,
    dump,
    idem_key,
    int_query,
    lease_json,
    limit_query,
    page_json,
    store_path,
    tracker_of,
    until_closing,
)
from tracker_client.serve.http import (
    ApiError,
    Handlers,
    json_response,
    no_content,
    raw_json_response,
    read_model,
)

__all__ = ["HANDLERS", "MAX_WAIT_MS"]

#: This module's handlers by operation name.
HANDLERS = Handlers()


# -- store ----------------------------------------------------------------------------------------
@HANDLERS
async def store_put(request: Request) -> Response:
    """``PUT /store/{namespace}/{key}``: upsert a value (204). The key is read from the raw path
    (it may hold ``/``)."""
    body = await read_model(request, w.StoreBody)
    namespace, key = store_path(request)
    await tracker_of(request).store_put(namespace, key, body.value)
    return no_content()


@HANDLERS
async def store_get(request: Request) -> Response:
    """``GET /store/{namespace}/{key}``: get a value. The key is read from the raw path (it may
    hold ``/``)."""
    namespace, key = store_path(request)
    return json_response(dump(await tracker_of(request).store_get(namespace, key)))


@HANDLERS
async def store_delete(request: Request) -> Response:
    """``DELETE /store/{namespace}/{key}``: delete a key (204). The key is read from the raw path
    (it may hold ``/``)."""
    namespace, key = store_path(request)
    await tracker_of(request).store_delete(namespace, key)
    return no_content()


@HANDLERS
async def store_search(request: Request) -> Response:
    """``GET /store/search``: full-text search of the store."""
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


@HANDLERS
async def cancel_all(request: Request) -> Response:
    """``POST /ops/cancel-all``: cancel every task of a pipeline and/or role."""
    body = await read_model(request, w.CancelAllBody)
    count = await tracker_of(request).cancel_all(
        pipeline_id=body.pipeline_id, role=body.role, idempotency_key=idem_key(request)
    )
    request.state.changed = count > 0
    return json_response({"cancelled": count})


@HANDLERS
async def maintenance(request: Request) -> Response:
    """Reclaim expired leases and the like. A pass that changed nothing (what idle workers'
    periodic passes mostly are) wakes no waiter: each wake-up costs every worker a claim."""
    report = await tracker_of(request).maintenance()
    request.state.changed = bool(
        report.expired_leases
        or report.expired_tasks
        or report.crash_looped
        or report.scheduled_tasks  # a schedule's tick made claimable work
    )
    return json_response(dump(report))


@HANDLERS
async def wait(request: Request) -> Response:
    """``GET /tasks/{task_id}/wait``: wait up to timeout_ms (max 60000) for the task to finish. A
    stopping server answers the state as it is now."""
    timeout_ms = int_query(request, "timeout_ms", 30_000)
    if not 0 <= timeout_ms <= MAX_WAIT_MS:
        raise ApiError(400, "invalid_request", f"timeout_ms must be 0..{MAX_WAIT_MS}")
    tracker, task_id = tracker_of(request), request.path_params["task_id"]
    result = await until_closing(
        request, lambda: tracker.wait(task_id, timeout_s=timeout_ms / 1000)
    )
    if result is None:  # the server is stopping: answer with the state as it is now
        result = await tracker.wait(task_id, timeout_s=0)
    return json_response(dump(result))


@HANDLERS
async def follow_task(request: Request) -> Response:
    """``GET /tasks/{task_id}/follow``: the task's events after ``after`` as soon as there is one
    or the task is finished, else after timeout_ms (max 60000). A stopping server answers what
    there is now."""
    timeout_ms = int_query(request, "timeout_ms", 30_000)
    if not 0 <= timeout_ms <= MAX_WAIT_MS:
        raise ApiError(400, "invalid_request", f"timeout_ms must be 0..{MAX_WAIT_MS}")
    tracker, task_id = tracker_of(request), request.path_params["task_id"]
    args = {"after": request.query_params.get("after") or None, "limit": limit_query(request, 100)}

    async def follow(wait_ms: int) -> Any:
        return await tracker.call("follow_task", task_id, timeout_ms=wait_ms, **args)

    result = await until_closing(request, lambda: follow(timeout_ms))
    if result is None:  # the server is stopping: answer with what there is now
        result = await follow(0)
    return json_response(dump(result))


@HANDLERS
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


@HANDLERS
async def parked_claim(request: Request) -> Response:
    """``POST /leases/claim-parked``: ``claim_many`` waiting up to ``wait_ms`` for work.

    A client that leaves while it waits cancels it (nothing more is leased, and a lease taken
    as it left is given back: nobody would read the answer); a stopping server cancels it too
    and answers ``[]``. A retry under the same ``Idempotency-Key`` answers the same leases.
    """
    body = await read_model(request, ParkedClaimBody)
    tracker, key = tracker_of(request), idem_key(request)
    closing: Closing = request.app.state.closing
    leases: list[Lease] = []
    error: Exception | None = None

    async def cancel() -> None:
        with anyio.CancelScope(shield=True):
            await tracker.cancel_parked_claim(idempotency_key=key)

    async with anyio.create_task_group() as tg:

        async def claim() -> None:
            nonlocal leases, error
            try:
                leases = await tracker.parked_claim(
                    body.agent_id,
                    body.agent_role,
                    body.lease_ttl_ms,
                    body.n,
                    body.wait_ms,
                    concurrency=body.concurrency,
                    idempotency_key=key,
                )
            except Exception as exc:
                error = exc
            tg.cancel_scope.cancel()

        async def client_gone() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass  # the body was read: the next message comes when the client leaves
            await cancel()

        async def stopping() -> None:
            await closing.wait()
            await cancel()

        tg.start_soon(claim)
        tg.start_soon(client_gone)
        tg.start_soon(stopping)
    if error is not None:
        raise error
    return raw_json_response(b"[" + b",".join(map(lease_json, leases)) + b"]")


@HANDLERS
async def list_task_events(request: Request) -> Response:
    """``GET /tasks/{task_id}/events``: every event of the task."""
    page = await tracker_of(request).list_task_events(
        request.path_params["task_id"],
        limit=limit_query(request, 100),
        cursor=request.query_params.get("cursor"),
        kind=request.query_params.get("kind"),
    )
    return json_response(page_json(page))
