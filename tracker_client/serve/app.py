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
* OTLP ingest (``POST /v1/traces``, ``/otlp/v1/traces``) as NullTickets', with its own smaller
  body limit (4 MiB; 413 over it) and 400s naming what is wrong (:mod:`tracker_client.serve.otlp`).

Everything a route is (method, path, auth class, body, answer, extension, whether it wakes long
polls) is read from the wire contract (:mod:`tracker_client.nulltickets.contract`); this module
only binds the table to the handlers of :mod:`~tracker_client.serve.routes` and
:mod:`~tracker_client.serve.extra_routes` (an operation without one is served by
:func:`~tracker_client.serve.generic.generic_handler`), and adds auth and the error pages.

It may touch the tracker it is given (through the ``Tracker`` protocol, by its handlers; the caller
opens and closes it), Starlette, the wire contract and the api token (compared in constant time);
the server and its sockets are :mod:`worker.cli.serve`'s.
"""

from __future__ import annotations

import hmac
import secrets

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tracker_client.dashboard import DashboardSettings, create_dashboard
from tracker_client.nulltickets import contract
from tracker_client.protocol import Tracker
from tracker_client.serve import batch_routes, extra_routes, otlp, routes
from tracker_client.serve.generic import generic_handler
from tracker_client.serve.helpers import Closing
from tracker_client.serve.http import GENERATION_HEADER, bearer, endpoint, error_response

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "EXTENSIONS",
    "GENERATION_HEADER",
    "ROUTES",
    "AuthMiddleware",
    "Closing",
    "create_app",
]

#: The served tracker reads requests up to this size (NullTickets: 64 KiB).
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024

#: Where the web dashboard is mounted (:mod:`tracker_client.dashboard`; its own login).
DASHBOARD_PATH = "/ui"

#: Advertised in ``GET /health``; the client uses the extension routes only when listed.
EXTENSIONS = tuple(contract.EXTENSIONS)

_HANDLERS = {**routes.HANDLERS, **extra_routes.HANDLERS, **otlp.HANDLERS, **batch_routes.HANDLERS}


def _starlette_path(op: contract.Operation) -> str:
    """The route path of ``op``. A store key may hold ``/`` (sent as ``%2F``, which Starlette
    decodes before matching): it matches with the ``path`` converter, and the handler reads
    the key back from the raw path (:func:`~tracker_client.serve.helpers.store_path`)."""
    return op.path.replace("{key}", "{key:path}")


def _routes() -> list[Route]:
    stray = set(_HANDLERS) - {op.name for op in contract.OPERATIONS}
    if stray:  # a handler of no operation: a renamed or removed row
        raise RuntimeError(f"served tracker: handlers of no contract operation: {sorted(stray)}")
    return [
        Route(
            _starlette_path(op),
            endpoint(op, _HANDLERS.get(op.name) or generic_handler(op)),
            methods=[op.method],
            name=op.name,
        )
        for op in contract.OPERATIONS
    ]


#: Every route, in the contract's order (the first match wins).
ROUTES = _routes()


def _raw_path(scope: Scope) -> str:
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    return raw.split(b"?")[0].decode("latin-1")


class AuthMiddleware:
    """The auth class of each route is the contract's: public routes need nothing; lease routes
    need *a* Bearer value, which the tracker then checks against the lease; admin routes (and
    unknown ones, as on NullTickets) need the admin token when one is set."""

    def __init__(self, app: ASGIApp, api_token: str | None) -> None:
        self.app = app
        self._token = api_token.encode() if api_token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = contract.match(scope["method"], _raw_path(scope))
        auth = found[0].auth if found is not None else "admin"
        value = bearer(Request(scope))
        if auth == "lease":
            if value is None:
                response = error_response(401, "unauthorized", "Missing Authorization header")
                await response(scope, receive, send)
                return
        elif (
            auth == "admin"
            and self._token is not None
            and (value is None or not hmac.compare_digest(value.encode(), self._token))
        ):
            response = error_response(
                401, "unauthorized", "Missing or invalid Authorization header"
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class DashboardMount:
    """Hands requests under :data:`DASHBOARD_PATH` to the dashboard (which asks for the token
    itself: a login form) before the API's auth; the API's route table stays the contract's."""

    def __init__(self, app: ASGIApp, dashboard: ASGIApp) -> None:
        self.app = app
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and (
            path == DASHBOARD_PATH or path.startswith(DASHBOARD_PATH + "/")
        ):
            root = scope.get("root_path", "") + DASHBOARD_PATH
            await self.dashboard({**scope, "root_path": root}, receive, send)
            return
        await self.app(scope, receive, send)


async def _not_found(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException) and exc.status_code not in (404, 405):
        return error_response(exc.status_code, "http_error", str(exc.detail))
    return error_response(404, "not_found", "Not found")


def create_app(
    tracker: Tracker,
    *,
    api_token: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_otlp_bytes: int = otlp.DEFAULT_MAX_OTLP_BYTES,
) -> Starlette:
    """The ASGI app serving ``tracker``, with the web dashboard at :data:`DASHBOARD_PATH`
    (read-only without ``api_token``). The caller owns the tracker (opens and closes it)."""
    app = Starlette(
        routes=ROUTES,
        exception_handlers={404: _not_found, 405: _not_found, HTTPException: _not_found},
    )
    app.state.tracker = tracker
    app.state.max_request_bytes = max_request_bytes
    app.state.max_otlp_bytes = max_otlp_bytes  # POST /v1/traces bodies (413 over it)
    app.state.boot_id = secrets.token_hex(4)
    app.state.generation = 0
    app.state.closing = Closing()  # the serving loop sets it when it stops (long polls end)
    app.add_middleware(AuthMiddleware, api_token=api_token)
    dashboard = create_dashboard(tracker, DashboardSettings(admin_token=api_token))
    app.add_middleware(DashboardMount, dashboard=dashboard)  # outermost: before the API's auth
    return app
