"""The HTTP plumbing every handler of the served tracker uses: JSON answers, error answers, the
endpoint wrapper, reading and validating a body, the Bearer header.

Handlers (:mod:`~tracker_client.serve.routes`, :mod:`~tracker_client.serve.extra_routes`)
import this room; the application (:mod:`~tracker_client.serve.app`) sits on top of them. It
may touch Starlette requests and responses and the error table
(:mod:`tracker_client.contract.wire_errors`), never the tracker's storage.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from tracker_client.contract.table import Operation
from tracker_client.contract.wire_errors import error_body, response_for
from tracker_client.errors import TrackerCorrupt, TrackerError
from tracker_client.serve.body import BodyRefused, parse_json_body
from tracker_client.validation import describe_validation

__all__ = [
    "GENERATION_HEADER",
    "ApiError",
    "Handler",
    "Handlers",
    "bearer",
    "endpoint",
    "error_response",
    "json_response",
    "no_content",
    "parse_body",
    "parse_model",
    "raw_json_response",
    "read_body",
    "read_bytes",
    "read_model",
    "tracker_error_response",
]

log = logging.getLogger("backlog_worker.server")

#: A route handler: one request in, one answer out (errors raised, answered by :func:`endpoint`).
Handler = Callable[[Request], Awaitable[Response]]

#: ``<boot id>:<count of work-making writes served>`` on every answer; a client passes the last
#: value it saw as ``since`` to ``GET /ops/wait-for-work`` so a write it raced with still wakes it.
GENERATION_HEADER = "X-Rail-Generation"

M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """An HTTP error answer decided by the server itself (bad JSON, auth, size)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class Handlers(dict[str, Handler]):
    """Handlers by operation name (:mod:`tracker_client.contract.table`); used as a
    decorator, it registers a handler under its function name, which is the operation's."""

    def __call__(self, handler: Handler) -> Handler:
        """Register ``handler`` under its name and return it unchanged."""
        self[handler.__name__] = handler
        return handler


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A compact JSON answer."""
    return JSONResponse(body, status_code=status, headers=headers)


def raw_json_response(body: bytes, status: int = 200) -> Response:
    """An answer whose JSON text is already made (a model's own ``model_dump_json``, which
    pydantic writes in one pass, at well under half the CPU of dumping to Python data and
    encoding that)."""
    return Response(body, status_code=status, media_type="application/json")


def no_content(status: int = 204) -> Response:
    """An empty answer (204: the store's writes, a claim with no work)."""
    return Response(status_code=status, media_type="application/json")


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """``{"error":{"code","message",...}}``, always valid JSON."""
    return json_response(error_body(code, message, **extra), status, headers)


def tracker_error_response(exc: TrackerError) -> Response:
    """The tracker's exception as a NullTickets server would answer it (the error table)."""
    if isinstance(exc, TrackerCorrupt):
        log.error("tracker storage unusable: %s", exc, extra={"action": "tracker_corrupt"})
    status, body, headers = response_for(exc)
    return json_response(body, status, headers or None)


def endpoint(op: Operation, handler: Handler) -> Handler:
    """Wrap ``op``'s handler: every failure becomes a JSON error answer, every answer carries
    the generation header, and a success of a waking operation (``op.wakes``) counts.

    Claims, heartbeats, events, artifacts and the store never wake (counting them would make
    idle workers wake each other up). A handler whose call changed nothing (a maintenance pass
    with nothing to do, a cancel-all of no task) sets ``request.state.changed = False``, and
    a 204 is no change either.
    """
    wakes = op.wakes

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


async def read_bytes(request: Request, cap: int) -> bytes:
    """The raw body, or ``ApiError`` 413 over ``cap`` bytes (refused on its declared
    ``Content-Length`` before a byte is read) or 400 when the client left mid-body."""
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
    return bytes(buffer)


def parse_body(raw: bytes, *, required: bool = True) -> Any:
    """The JSON document of a raw body (None for an empty optional one), or ``ApiError`` 400
    (``invalid_json``/``json_too_deep``), through the one parser with depth and shape limits."""
    if not raw.strip():
        if required:
            raise ApiError(400, "invalid_json", "Invalid JSON body: the body is empty")
        return None
    try:
        return parse_json_body(raw)
    except BodyRefused as exc:
        raise ApiError(400, exc.code, str(exc)) from exc


async def read_body(request: Request, *, required: bool = True, limit: int | None = None) -> Any:
    """The JSON body, or ``ApiError`` (413 over the limit, 400 ``invalid_json``/``json_too_deep``).

    Every route reads its body here, so every route gets the same depth and shape limits
    (:func:`tracker_client.serve.body.parse_json_body`). ``limit`` lowers the size cap for a
    route whose bodies are small. Lease routes call this only after the lease was checked.
    """
    cap: int = request.app.state.max_request_bytes
    if limit is not None:
        cap = min(cap, limit)
    return parse_body(await read_bytes(request, cap), required=required)


def parse_model(model: type[M], doc: Any) -> M:
    """Validate a request body; a missing or mistyped field is 400 ``invalid_json`` naming it."""
    if not isinstance(doc, dict):
        raise ApiError(400, "invalid_json", "Invalid JSON body: expected an object")
    try:
        # extra="ignore": unknown fields are ignored as NullTickets does, even where the model
        # itself (a create input such as TaskCreate) refuses them when built in code.
        return model.model_validate(doc, extra="ignore")
    except ValidationError as exc:
        where = describe_validation(exc, first_only=True, empty="(body)")
        raise ApiError(400, "invalid_json", f"Invalid JSON body: {where}") from exc


async def read_model(
    request: Request, model: type[M], *, required: bool = True, limit: int | None = None
) -> M:
    """Read and validate the body as ``model``; an optional body that is empty reads as ``{}``."""
    doc = await read_body(request, required=required, limit=limit)
    return parse_model(model, doc if doc is not None else {})


def bearer(request: Request) -> str | None:
    """The value of ``Authorization: Bearer <value>`` (exact scheme and one space), or None."""
    header = request.headers.get("authorization")
    if header is None or not header.startswith("Bearer ") or len(header) == len("Bearer "):
        return None
    return header[len("Bearer ") :]
