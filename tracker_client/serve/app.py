"""``backlog-worker tracker serve``: a tracker (the embedded one) served over the NullTickets API.

Same routes, methods, JSON shapes, statuses and error codes as NullTickets (see the HTTP API,
docs/reference/http-api.md), with its traps fixed (docs/guarantees/nulltickets.md), and
extension routes for what NullTickets lacks (cancel, requeue, cancel-all, wait, maintenance,
every run, task events). The differences a client can see:

* error bodies are always valid JSON ``{"error":{"code","message"}}``; a backlog at its cap is
  ``429`` with ``Retry-After`` and ``role``/``depth``/``cap`` in the error object; an invalid
  trigger lists ``allowed``; a transient tracker failure is ``503`` with ``Retry-After``;
* ``GET /health`` advertises ``"extensions"`` and ``"limits"`` (what the client reads to use the
  extension routes and a larger request limit);
* the api token (optional) uses the same two-token model: admin token on admin routes, the lease
  token on ``POST /leases/{id}/heartbeat`` and ``POST /runs/{id}/{events,transition,fail}``;
  ``GET /runs/{id}/events`` needs the admin token (NullTickets accepts any Bearer there);
  an address that sent 10 wrong admin tokens within a minute gets ``429`` until the minute
  has passed (:mod:`~tracker_client.serve.throttle`), and failures are logged by address;
* the ``Idempotency-Key`` header becomes the tracker's ``idempotency_key`` (successes only are
  remembered, so a cached 204 or error is never replayed);
* requests up to ``max_request_bytes`` (16 MiB by default) are read; larger ones get ``413``;
  lease routes check the lease before they read a byte of the body, and every body goes through
  one parser with depth and shape limits (:mod:`tracker_client.serve.body`).
* OTLP ingest (``POST /v1/traces``, ``/otlp/v1/traces``) as NullTickets', with its own smaller
  body limit (4 MiB; 413 over it) and 400s naming what is wrong (:mod:`tracker_client.serve.otlp`).

Everything a route is (method, path, auth class, body, answer, extension, whether it wakes long
polls) is read from the wire contract (:mod:`tracker_client.contract.table`); this module
only binds the table to the handlers of :mod:`~tracker_client.serve.routes` and
:mod:`~tracker_client.serve.extra_routes` (an operation without one is served by
:func:`~tracker_client.serve.generic.generic_handler`), and adds auth and the error pages.
A request is matched once, against the table's index (no middleware stack, no linear route
list): the served tracker's own cost per request is then its handler's and uvicorn's.

It may touch the tracker it is given (through the ``Tracker`` protocol, by its handlers; the caller
opens and closes it), Starlette's requests and responses, the wire contract and the api token
(compared in constant time); the server and its sockets are :mod:`worker.cli.serve`'s.
"""

from __future__ import annotations

import hmac
import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.datastructures import State
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tracker_client.contract import table as contract
from tracker_client.dashboard import DashboardSettings, create_dashboard
from tracker_client.protocol import Tracker
from tracker_client.serve import batch_routes, extra_routes, otlp, routes
from tracker_client.serve.browser import (
    HostRule,
    Refusal,
    host_refusal,
    json_type_refusal,
    write_refusal,
)
from tracker_client.serve.generic import generic_handler
from tracker_client.serve.helpers import Closing
from tracker_client.serve.http import (
    GENERATION_HEADER,
    ApiError,
    Handler,
    endpoint,
    error_response,
    log,
    parse_body,
    read_bytes,
)
from tracker_client.serve.scopes import BODY_CHECKED, ScopeGuard
from tracker_client.serve.throttle import AuthThrottle
from tracker_client.serve.tokens import ScopedToken, TokenStore

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "EXTENSIONS",
    "GENERATION_HEADER",
    "ROUTES",
    "Closing",
    "ServedApp",
    "create_app",
]

#: The served tracker reads requests up to this size (NullTickets: 64 KiB).
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024

#: Where the web dashboard is mounted (:mod:`tracker_client.dashboard`; its own login).
DASHBOARD_PATH = "/ui"

#: Advertised in ``GET /health``; the client uses the extension routes only when listed.
EXTENSIONS = tuple(contract.EXTENSIONS)

_HANDLERS = {**routes.HANDLERS, **extra_routes.HANDLERS, **otlp.HANDLERS, **batch_routes.HANDLERS}


def _endpoints() -> dict[str, Handler]:
    stray = set(_HANDLERS) - {op.name for op in contract.OPERATIONS}
    if stray:  # a handler of no operation: a renamed or removed row
        raise RuntimeError(f"served tracker: handlers of no contract operation: {sorted(stray)}")
    return {
        op.name: endpoint(op, _HANDLERS.get(op.name) or generic_handler(op))
        for op in contract.OPERATIONS
    }


#: Each operation's endpoint (its handler wrapped by :func:`~tracker_client.serve.http.endpoint`).
ENDPOINTS = _endpoints()

#: Every route, in the contract's order, as Starlette routes: what the API serves, for whoever
#: reads the table (tests, the OpenAPI check). Requests are dispatched by
#: :func:`tracker_client.contract.table.match` (an index by method and segment count).
ROUTES = [
    Route(
        op.path.replace("{key}", "{key:path}"),
        ENDPOINTS[op.name],
        methods=[op.method],
        name=op.name,
    )
    for op in contract.OPERATIONS
]

_UNAUTHORIZED_LEASE = "Missing Authorization header"
_UNAUTHORIZED_ADMIN = "Missing or invalid Authorization header"

#: Answers one request, given the receive and send channels to use.
Call = Callable[[Receive, Send], Awaitable[None]]
#: Wraps the dispatch of every request (the metrics): ``(operation name, scope, receive, send,
#: call)``; the observer answers the request through ``call`` (with channels of its own).
Observer = Callable[[str, Scope, Receive, Send, Call], Awaitable[None]]


def _bearer(scope: Scope) -> bytes | None:
    """The value of ``Authorization: Bearer <value>`` (exact scheme, one space), or None."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            if not value.startswith(b"Bearer ") or len(value) == len(b"Bearer "):
                return None
            return bytes(value[len(b"Bearer ") :])
    return None


class ServedApp:
    """The served tracker's ASGI application: one function per request, no middleware stack.

    A request is matched once against the contract (:func:`~tracker_client.nulltickets.\
contract.match`); the row gives its auth class and its endpoint. Public routes need nothing;
    lease routes need *a* Bearer value, which the tracker then checks against the lease; admin
    routes (and unknown ones, as on NullTickets) need the admin token when one is set (compared
    in constant time). Requests under :data:`DASHBOARD_PATH` go to the dashboard, which asks
    for the token itself (a login form). Unknown routes (and a known path with another
    method) are 404 ``not_found``, as on NullTickets, but TRACE is 405 ``method_not_allowed``
    on every path; anything an endpoint lets escape is a JSON 500.

    ``state`` holds what handlers read through ``request.app.state``: the tracker, the body
    limits, the generation counter and the :class:`Closing` of long polls.
    """

    def __init__(
        self,
        tracker: Tracker,
        dashboard: ASGIApp,
        api_token: str | None,
        hosts: HostRule | None = None,
        tokens: TokenStore | None = None,
    ) -> None:
        self.state = State()
        self.hosts = hosts or HostRule.for_bind("127.0.0.1")
        self.state.tracker = tracker
        self.routes = ROUTES
        self.dashboard = dashboard
        self._token = api_token.encode() if api_token else None
        #: The scoped tokens (:mod:`~tracker_client.serve.tokens`), checked after the admin one.
        self.tokens = tokens
        self.guard = ScopeGuard(tracker)
        #: Wrong admin tokens per client address (:mod:`~tracker_client.serve.throttle`).
        self.throttle = AuthThrottle()
        self._observer: Observer | None = None

    def observe(self, observer: Observer) -> None:
        """Wrap every request's dispatch in ``observer`` (the served metrics)."""
        self._observer = observer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request (``lifespan`` is not used: the server runs with it off)."""
        if scope["type"] != "http":
            return
        scope["app"] = self
        path: str = scope["path"]
        # Before auth and routing: a rebinding page's Host, a browser's cross-origin write.
        browser = host_refusal(scope, self.hosts) or write_refusal(scope)
        if browser is not None:
            await self._observed("refused", scope, receive, send, _refuse(browser))
            return
        if path == DASHBOARD_PATH or path.startswith(DASHBOARD_PATH + "/"):
            root = scope.get("root_path", "") + DASHBOARD_PATH
            await self._observed("ui", scope, receive, send, self._ui({**scope, "root_path": root}))
            return
        raw: bytes = scope.get("raw_path") or path.encode()
        method: str = scope["method"]
        if method == "TRACE":  # never served: a reflected request could echo its headers
            await self._observed("unknown", scope, receive, send, _not_allowed(method, raw))
            return
        found = contract.match("GET" if method == "HEAD" else method, _path_of(raw))
        if found is None:
            await self._observed("unknown", scope, receive, send, self._unknown(scope))
            return
        op, params = found
        scope["path_params"] = params
        untyped = None if op.raw_body else json_type_refusal(scope)
        if untyped is not None:  # a JSON route takes JSON only (no cross-site form can send it)
            await self._observed(op.name, scope, receive, send, _refuse(untyped))
            return
        await self._observed(op.name, scope, receive, send, self._answer(op, scope))

    async def _observed(
        self,
        name: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        call: Call,
    ) -> None:
        if self._observer is None:
            await call(receive, send)
        else:
            await self._observer(name, scope, receive, send, call)

    def _ui(self, scope: Scope) -> Call:
        async def call(receive: Receive, send: Send) -> None:
            await self.dashboard(scope, receive, send)

        return call

    def _unknown(self, scope: Scope) -> Call:
        async def call(receive: Receive, send: Send) -> None:
            refused = self._refused("admin", scope)
            if isinstance(refused, ScopedToken):
                refused = None  # a valid token of any kind learns only that the route is unknown
            await (refused or error_response(404, "not_found", "Not found"))(scope, receive, send)

        return call

    def _answer(self, op: contract.Operation, scope: Scope) -> Call:
        async def call(receive: Receive, send: Send) -> None:
            refused = self._refused(op.auth, scope)
            if isinstance(refused, ScopedToken):
                refused, receive = await self._scoped(refused, op, scope, receive)
            if refused is not None:
                await refused(scope, receive, send)
                return
            started = False

            async def sending(message: Any) -> None:
                nonlocal started
                started = True
                await send(message)

            try:
                response = await ENDPOINTS[op.name](Request(scope, receive, sending))
                await response(scope, receive, sending)
            except Exception:
                if started:
                    raise  # uvicorn closes the connection and logs it
                log.exception(
                    "unexpected error on %s %s",
                    scope["method"],
                    scope["path"],
                    extra={"action": "server_error"},
                )
                await error_response(500, "internal_error", "Internal server error")(
                    scope, receive, send
                )

        return call

    async def _scoped(
        self, token: ScopedToken, op: contract.Operation, scope: Scope, receive: Receive
    ) -> tuple[Any, Receive]:
        """(the 403 answer or None, the request's ``receive``) for a scoped token's call; a body
        the check reads is read here, within the size cap, and replayed to the endpoint."""
        body: Any = None
        if token.kind in BODY_CHECKED.get(op.name, ()):
            try:
                raw = await read_bytes(Request(scope, receive), self.state.max_request_bytes)
                body = parse_body(raw, required=False)
            except ApiError as exc:
                return error_response(exc.status, exc.code, exc.message), receive
            receive = _replay(raw, receive)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        why = await self.guard.refusal(token, op, scope["path_params"], query, body)
        if why is None:
            return None, receive
        log.warning(
            "refused %s %s: %s",
            scope["method"],
            scope["path"],
            why,
            extra={"action": "scope_refused", "token_name": token.name, "operation": op.name},
        )
        return error_response(403, "forbidden", why), receive

    def _refused(self, auth: str, scope: Scope) -> Any:
        """The 401 answer when the request lacks what its auth class needs, the scoped token
        presented when it is one (:meth:`_scoped` checks its call), else None."""
        if auth == "public":
            return None
        value = _bearer(scope)
        if auth == "lease":
            if value is None:
                return error_response(401, "unauthorized", _UNAUTHORIZED_LEASE)
            return None
        if self._token is None:
            return None
        if value is None:
            return error_response(401, "unauthorized", _UNAUTHORIZED_ADMIN)
        client = _client(scope)
        wait_s = self.throttle.wait_s(client)
        if wait_s:  # a guesser: refused before its token is even compared
            retry = str(math.ceil(wait_s))
            return error_response(
                429,
                "too_many_failed_auth",
                f"too many wrong api tokens from this address; retry in {retry} s",
                {"Retry-After": retry},
            )
        if hmac.compare_digest(value, self._token):
            return None
        scoped = self.tokens.find(value) if self.tokens is not None else None
        if scoped is not None:
            return scoped
        self.throttle.failed(client)
        return error_response(401, "unauthorized", _UNAUTHORIZED_ADMIN)


def _reader_check(tokens: TokenStore) -> Callable[[str], bool]:
    """Whether a value is one of ``tokens``' read tokens (the dashboard's read-only login)."""

    def check(value: str) -> bool:
        token = tokens.find(value.encode())
        return token is not None and token.kind == "read"

    return check


def _replay(raw: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the endpoint the body read already, then the client's own."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return replay


def _not_allowed(method: str, raw: bytes) -> Call:
    """405 ``method_not_allowed`` with the path's methods in ``Allow`` (the API's for an
    unknown path): the API never answers TRACE (a reflected request could echo headers such
    as the token), on any path."""
    path = _path_of(raw)
    allowed = [m for m in ("GET", "POST", "PUT", "DELETE") if contract.match(m, path)]
    if "GET" in allowed:
        allowed.insert(1, "HEAD")
    allow = ", ".join(allowed or ("GET", "HEAD", "POST", "PUT", "DELETE"))

    async def call(receive: Receive, send: Send) -> None:
        answer = error_response(
            405, "method_not_allowed", f"method {method} is not allowed", {"Allow": allow}
        )
        await answer({"type": "http"}, receive, send)

    return call


def _refuse(refusal: Refusal) -> Call:
    async def call(receive: Receive, send: Send) -> None:
        response = error_response(refusal.status, refusal.code, refusal.message)
        await response({"type": "http"}, receive, send)

    return call


def _client(scope: Scope) -> str:
    """The client's address: the TCP peer, or what a trusted proxy forwarded (uvicorn sets
    it only for ``--trusted-proxy`` addresses)."""
    client = scope.get("client")
    return str(client[0]) if client else "?"


def _path_of(raw: bytes) -> str:
    """The path as sent, without a query string (some ASGI servers keep it in ``raw_path``)."""
    return raw.partition(b"?")[0].decode("latin-1")


def create_app(
    tracker: Tracker,
    *,
    api_token: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_otlp_bytes: int = otlp.DEFAULT_MAX_OTLP_BYTES,
    hosts: HostRule | None = None,
    tokens: TokenStore | None = None,
) -> ServedApp:
    """The ASGI app serving ``tracker``, with the web dashboard at :data:`DASHBOARD_PATH`
    (read-only without ``api_token``). The caller owns the tracker (opens and closes it).
    ``hosts``: the ``Host`` names answered (default: loopback's; :mod:`~tracker_client.serve.\
browser`)."""
    is_reader = None if tokens is None else _reader_check(tokens)
    closing = Closing()  # the serving loop sets it when it stops (long polls, live pages end)
    dashboard = create_dashboard(
        tracker, DashboardSettings(admin_token=api_token, is_reader=is_reader, closing=closing)
    )
    app = ServedApp(tracker, dashboard, api_token, hosts, tokens)
    app.state.max_request_bytes = max_request_bytes
    app.state.max_otlp_bytes = max_otlp_bytes  # POST /v1/traces bodies (413 over it)
    app.state.boot_id = secrets.token_hex(4)
    app.state.generation = 0
    app.state.closing = closing
    return app
