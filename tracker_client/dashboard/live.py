"""A task's live page: its events streamed to the browser as they happen (Server-Sent Events),
and the one static script that reads them.

``GET /tasks/{id}/stream`` answers ``text/event-stream`` fed by the rail's ``follow_task``
operation (extension ``follow``, :mod:`tracker_client.contract.operations`): each new event is
an ``rail-event`` message (its id is the SSE id, so a reconnecting browser sends it back as
``Last-Event-ID`` and misses nothing), each batch is followed by a ``task`` message (state and
stage), and the task's end by ``end``. One response lasts at most :data:`STREAM_S` seconds, then
the browser reconnects from where it was, and a stopping server (``DashboardSettings.closing``)
ends every stream at once: no open page holds up a stop. Every
value is sent as text in JSON and the script sets it with ``textContent`` (never markup).

It may touch the tracker (reads: ``follow_task``, ``get_task``) and the script file beside it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tracker_client import calls
from tracker_client.dashboard import render
from tracker_client.dashboard.auth import Viewer
from tracker_client.dashboard.data import Catalog, fresh_state, last_requeue, optional
from tracker_client.dashboard.state import BadParam, Dashboard
from tracker_client.ops_models import TaskFollow
from tracker_client.task_states import task_state

if TYPE_CHECKING:
    from tracker_client.serve.helpers import Closing

__all__ = ["STREAM_S", "script", "stream"]

#: Longest one stream response lasts (the browser then reconnects with ``Last-Event-ID``).
STREAM_S = 25.0

#: Longest one ``follow_task`` call waits for an event (ms).
FOLLOW_MS = 10_000

#: Most events read per ``follow_task`` call.
BATCH = 100

_SCRIPT = resources.files("tracker_client.dashboard").joinpath("static/console.js")


async def script(request: Request) -> Response:
    """The dashboard's one script (no secret in it: served to anyone, like the login form)."""
    headers = {**render.HEADERS, "Cache-Control": "no-cache"}
    return Response(_SCRIPT.read_bytes(), media_type="text/javascript", headers=headers)


def _after(request: Request) -> str | None:
    """Where the stream starts: the ``Last-Event-ID`` a reconnecting browser sends, else
    ``after`` (the last event the page shows); an event id, a whole number."""
    for name, value in (
        ("Last-Event-ID", request.headers.get("last-event-id")),
        ("after", request.query_params.get("after")),
    ):
        if value:
            if not value.isdigit() or len(value) > 20:
                raise BadParam(name, f"{value[:40]!r} is not an event id (a whole number)")
            return value
    return None


async def _unless_closing(
    follow: Callable[[], Awaitable[TaskFollow]], closing: Closing | None
) -> tuple[TaskFollow | None, bool]:
    """``follow()`` (None: the rail cannot follow), cut short when the server starts stopping:
    (its answer, whether the server is stopping)."""
    if closing is None:
        return await optional(follow), False
    if closing.closed:
        return None, True
    answer: TaskFollow | None = None
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            nonlocal answer
            answer = await optional(follow)
            tg.cancel_scope.cancel()

        async def stop() -> None:
            await closing.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(run)
        tg.start_soon(stop)
    return answer, closing.closed


def _message(kind: str, data: dict[str, Any], event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def stream(request: Request, dash: Dashboard, viewer: Viewer) -> Response:
    """``text/event-stream`` of the task's new events, its state after each batch, its end."""
    task_id = request.path_params["task_id"]
    after = _after(request)
    await dash.tracker.get_task(task_id)  # NotFound: the 404 page, before any stream
    catalog = await Catalog.read(dash.tracker)

    async def state() -> dict[str, str]:
        detail = await dash.tracker.get_task(task_id)
        found = task_state(detail, catalog.stage(detail.pipeline_id, detail.stage), detail)
        found = fresh_state(found, detail.latest_run, await last_requeue(dash.tracker, task_id))
        return {"state": found, "stage": detail.stage}

    async def messages() -> AsyncIterator[str]:
        cursor = after
        deadline = time.monotonic() + STREAM_S
        yield "retry: 1000\n\n"
        while (left := deadline - time.monotonic()) > 0:
            wait_ms = int(min(left * 1000, FOLLOW_MS))

            async def follow(wait: int = wait_ms, since: str | None = cursor) -> TaskFollow:
                return await calls.FOLLOW_TASK.call(
                    dash.tracker, task_id, after=since, timeout_ms=wait, limit=BATCH
                )

            answer, stopping = await _unless_closing(follow, dash.settings.closing)
            if stopping:
                return  # the server stops: the browser reconnects to whatever serves next
            if answer is None:
                yield _message("end", {"outcome": "not followable on this rail"})
                return
            for event in answer.events:
                data = {
                    "id": event.id,
                    "run_id": event.run_id,
                    "when": render.when(event.ts_ms),
                    "kind": event.kind,
                    "data": render.pretty_json(event.data),
                }
                yield _message("rail-event", data, event.id)
            cursor = answer.next_cursor
            if answer.events or answer.finished:
                yield _message("task", await state())
            if answer.finished:
                yield _message("end", {"outcome": answer.outcome})
                return
            yield ": still here\n\n"  # a comment: finds a browser that went away

    headers = {**render.HEADERS, "X-Accel-Buffering": "no"}
    return StreamingResponse(messages(), media_type="text/event-stream", headers=headers)
