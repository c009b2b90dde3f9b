"""``backlog-worker tracker serve``: a tracker (the embedded one) served over the NullTickets API.

Same routes, methods, JSON shapes, statuses and error codes as NullTickets (CONTRACT.md s.5),
with its traps fixed as in BACKLOG-SEMANTICS.md, and extension routes for what NullTickets
lacks (cancel, requeue, cancel-all, wait, maintenance, every run, task events). The differences
a client can see:

* error bodies are always valid JSON ``{"error":{"code","message"}}``; a backlog at its cap is
  ``429`` with ``Retry-After`` and ``role``/``depth``/``cap`` in the error object; an invalid
  trigger lists ``allowed``; a transient tracker failure is ``503`` with ``Retry-After``;
* ``GET /health`` advertises ``"extensions"`` and ``"limits"`` (what the client reads to use the
  extension routes and a larger request limit);
* the api token (optional) uses the same two-token model: admin token on admin routes, the lease
  token on ``POST /leases/{id}/heartbeat`` and ``POST /runs/{id}/{events,transition,fail}``;
  ``GET /runs/{id}/events`` needs the admin token (NullTickets accepts any Bearer there);
* the ``Idempotency-Key`` header becomes the tracker's ``idempotency_key`` (successes only are
  remembered, so a cached 204 or error is never replayed);
* requests up to ``max_request_bytes`` (16 MiB by default) are read; larger ones get ``413``;
  lease routes check the lease before they read a byte of the body, and every body goes through
  one parser with depth and shape limits (:mod:`tracker_client.serve.body`).
"""

from __future__ import annotations

import hmac
import logging
import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tracker_client.errors import (
    BacklogFull,
    Conflict,
    InvalidTransition,
    LeaseLost,
    NotFound,
    TrackerCorrupt,
    TrackerError,
    TrackerRejected,
    TrackerUnavailable,
    Unsupported,
)
from tracker_client.protocol import Tracker
from tracker_client.serve.body import BodyRefused, parse_json_body

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "EXTENSIONS",
    "GENERATION_HEADER",
    "ApiError",
    "Closing",
    "create_app",
    "error_response",
    "json_response",
    "read_body",
]

log = logging.getLogger("backlog_worker.server")

#: The served tracker reads requests up to this size (NullTickets: 64 KiB).
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024

#: Advertised in ``GET /health``; the client uses the extension routes only when listed.
EXTENSIONS = (
    "backlog",
    "heartbeat_ttl",
    "fail_result",
    "cancel",
    "cancel_all",
    "requeue",
    "wait",
    "wait_for_work",
    "maintenance",
    "runs",
    "task_events",
    "release",
)

Handler = Callable[[Request], Awaitable[Response]]

#: ``<boot id>:<count of work-making writes served>`` on every answer; a client passes the last
#: value it saw as ``since`` to ``GET /ops/wait-for-work`` so a write it raced with still wakes it.
GENERATION_HEADER = "X-Rail-Generation"

#: Handlers whose success may make work claimable (claims, heartbeats, events, artifacts and the
#: store never do: counting them would make idle workers wake each other up). A handler whose
#: call changed nothing (a maintenance pass with nothing to do, a cancel-all of no task) sets
#: ``request.state.changed = False``, so it does not count either.
WAKING_HANDLERS = frozenset(
    {
        "create_task",
        "create_tasks",
        "transition",
        "fail",
        "unassign",
        "cancel",
        "cancel_all",
        "requeue",
        "maintenance",
    }
)
M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """An HTTP error answer decided by the server itself (bad JSON, auth, size)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A compact JSON answer."""
    return JSONResponse(body, status_code=status, headers=headers)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """``{"error":{"code","message",...}}``, always valid JSON."""
    return json_response({"error": {"code": code, "message": message, **extra}}, status, headers)


def _lease_lost(exc: LeaseLost) -> Response:
    if exc.code == "invalid_token":
        return error_response(401, "unauthorized", "Invalid token")
    if exc.code in ("expired", "revoked"):
        return error_response(410, exc.code, exc.message)
    return error_response(404, exc.code or "not_found", exc.message)


def tracker_error_response(exc: TrackerError) -> Response:
    """Map the exception tree to statuses, as a NullTickets server would answer."""
    if isinstance(exc, LeaseLost):
        return _lease_lost(exc)
    if isinstance(exc, InvalidTransition):
        return error_response(400, "invalid_transition", exc.message, allowed=exc.allowed)
    if isinstance(exc, BacklogFull):
        retry_after = max(1, math.ceil(exc.retry_after_s or 5))
        return error_response(
            429,
            exc.code,
            exc.message,
            headers={"Retry-After": str(retry_after)},
            role=exc.role,
            depth=exc.depth,
            cap=exc.cap,
        )
    if isinstance(exc, NotFound):
        return error_response(404, exc.code, exc.message)
    if isinstance(exc, Conflict):
        return error_response(409, exc.code, exc.message)
    if isinstance(exc, Unsupported):
        return error_response(501, exc.code, exc.message)
    if isinstance(exc, TrackerUnavailable):
        return error_response(503, exc.code, exc.message, headers={"Retry-After": "1"})
    if isinstance(exc, TrackerCorrupt):
        log.error("tracker storage unusable: %s", exc, extra={"action": "tracker_corrupt"})
        return error_response(500, "internal_error", exc.message)
    if isinstance(exc, TrackerRejected):
        return error_response(400, exc.code, exc.message)
    return error_response(500, "internal_error", exc.message)


def endpoint(handler: Handler) -> Handler:
    """Wrap a route handler: every failure becomes a JSON error answer."""

    wakes = handler.__name__ in WAKING_HANDLERS

    async def wrapped(request: Request) -> Response:
        try:
            response = await handler(request)
            state = request.app.state
            if (
                wakes
                and response.status_code < 300
                and response.status_code != 204
                and getattr(request.state, "changed", True)
            ):
                # No await between the tracker's commit and this bump: a wait-for-work that
                # arrives later sees either the new generation or the tracker's own wake-up.
                state.generation += 1
            response.headers[GENERATION_HEADER] = f"{state.boot_id}:{state.generation}"
            return response
        except ApiError as exc:
            return error_response(exc.status, exc.code, exc.message)
        except TrackerError as exc:
            return tracker_error_response(exc)
        except Exception:
            log.exception(
                "unexpected error on %s %s",
                request.method,
                request.url.path,
                extra={"action": "server_error"},
            )
            return error_response(500, "internal_error", "Internal server error")

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


async def read_body(request: Request, *, required: bool = True, limit: int | None = None) -> Any:
    """The JSON body, or ``ApiError`` (413 over the limit, 400 ``invalid_json``/``json_too_deep``).

    Every route reads its body here, so every route gets the same depth and shape limits
    (:func:`tracker_client.serve.body.parse_json_body`). ``limit`` lowers the size cap for a
    route whose bodies are small. Lease routes call this only after the lease was checked.
    """
    cap: int = request.app.state.max_request_bytes
    if limit is not None:
        cap = min(cap, limit)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        # Refused before a byte of the body is read (uvicorn then closes the connection).
        raise ApiError(413, "request_too_large", f"request body over {cap} bytes")
    buffer = bytearray()
    try:
        async for chunk in request.stream():
            buffer += chunk
            if len(buffer) > cap:
                raise ApiError(413, "request_too_large", f"request body over {cap} bytes")
    except ClientDisconnect as exc:
        # The client went away (or was closed at the body timeout): nobody reads the answer.
        raise ApiError(400, "client_disconnected", "the body did not arrive") from exc
    raw = bytes(buffer)
    del buffer
    if not raw.strip():
        if required:
            raise ApiError(400, "invalid_json", "Invalid JSON body: the body is empty")
        return None
    try:
        return parse_json_body(raw)
    except BodyRefused as exc:
        raise ApiError(400, exc.code, str(exc)) from exc


def parse_model(model: type[M], doc: Any) -> M:
    """Validate a request body; a missing or mistyped field is 400 ``invalid_json`` naming it."""
    if not isinstance(doc, dict):
        raise ApiError(400, "invalid_json", "Invalid JSON body: expected an object")
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(body)"
        raise ApiError(400, "invalid_json", f"Invalid JSON body: {where}: {first['msg']}") from exc


# -- authentication -------------------------------------------------------------------------------
_PUBLIC = {("GET", "/health"), ("GET", "/openapi.json"), ("GET", "/.well-known/openapi.json")}


def is_lease_route(method: str, path: str) -> bool:
    """POST heartbeat and run writes (release included): authenticated by the lease token, not
    the admin token."""
    parts = [p for p in path.split("/") if p]
    if method != "POST" or len(parts) != 3:
        return False
    return (parts[0] == "leases" and parts[2] == "heartbeat") or (
        parts[0] == "runs" and parts[2] in ("events", "transition", "fail", "release")
    )


def bearer(request: Request) -> str | None:
    """The value of ``Authorization: Bearer <value>`` (exact scheme and one space), or None."""
    header = request.headers.get("authorization")
    if header is None or not header.startswith("Bearer ") or len(header) == len("Bearer "):
        return None
    return header[len("Bearer ") :]


class AuthMiddleware:
    """Admin token on admin routes (and unknown ones); lease routes need *a* Bearer value, which
    the tracker then checks against the lease."""

    def __init__(self, app: ASGIApp, api_token: str | None) -> None:
        self.app = app
        self._token = api_token.encode() if api_token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        request = Request(scope)
        value = bearer(request)
        if is_lease_route(method, path):
            if value is None:
                response = error_response(401, "unauthorized", "Missing Authorization header")
                await response(scope, receive, send)
                return
        elif (
            self._token is not None
            and (method, path) not in _PUBLIC
            and (value is None or not hmac.compare_digest(value.encode(), self._token))
        ):
            response = error_response(
                401, "unauthorized", "Missing or invalid Authorization header"
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _not_found(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException) and exc.status_code not in (404, 405):
        return error_response(exc.status_code, "http_error", str(exc.detail))
    return error_response(404, "not_found", "Not found")


class Closing:
    """Set once the server stops: long polls (wait-for-work, task wait) answer at once instead
    of holding up a stop for their whole timeout (an idle worker's poll lasts up to 25 s)."""

    def __init__(self) -> None:
        self.closed = False
        self._event: anyio.Event | None = None  # made on first wait: needs a running loop

    def set(self) -> None:
        """Answer every long poll now, and any that starts later at once."""
        self.closed = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Return once :meth:`set` was called."""
        if self.closed:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


def create_app(
    tracker: Tracker,
    *,
    api_token: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> Starlette:
    """The ASGI app serving ``tracker``. The caller owns the tracker (opens and closes it)."""
    from tracker_client.serve.routes import ROUTES

    app = Starlette(
        routes=ROUTES,
        exception_handlers={404: _not_found, 405: _not_found, HTTPException: _not_found},
    )
    app.state.tracker = tracker
    app.state.max_request_bytes = max_request_bytes
    app.state.boot_id = secrets.token_hex(4)
    app.state.generation = 0
    app.state.closing = Closing()  # the serving loop sets it when it stops (long polls end)
    app.add_middleware(AuthMiddleware, api_token=api_token)
    return app
