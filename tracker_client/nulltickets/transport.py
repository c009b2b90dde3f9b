"""The HTTP layer of the NullTickets client: one request, its credentials, retries and errors.

This is the only module that touches ``httpx``. It implements the transport half of
CONTRACT.md s.9 ("What a robust worker must do"):

* one TCP connection per request (no keep-alive pool: the real server is single-threaded and a
  connection left idle against it blocks every other client) and ``Connection: close``;
* explicit connect/read/write timeouts;
* bodies are serialised once to bytes (so a retry sends the *same* bytes under the same
  ``Idempotency-Key``) and always carry ``Content-Length``, never chunked encoding;
* a size guard: a request over ``max_request_bytes`` is refused with ``ValidationFailed`` before
  it is sent, because the server drops requests over 64 KiB without any answer;
* the admin token on admin routes, the lease token *replacing* it on lease routes (there is no
  session-wide ``Authorization`` header to merge with);
* error bodies are parsed defensively (two of the server's error bodies are invalid JSON) and
  dispatched on the status first, then on ``error.code``;
* resets, timeouts and 5xx become ``TrackerUnavailable``, retried by tenacity (exponential
  backoff with jitter, a ceiling per wait and a total budget) with the same key and bytes.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import anyio
import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from tracker_client.errors import (
    BacklogFull,
    Conflict,
    InvalidTransition,
    LeaseLost,
    NotFound,
    TokenRefused,
    TrackerError,
    TrackerRejected,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)
from tracker_client.jsonlimits import check_json_limits

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "Auth",
    "HttpCore",
    "RetrySettings",
    "check_json",
    "dumps",
    "encode_query",
    "error_from_response",
    "loads",
    "parse_error_body",
    "quote_segment",
    "request_size",
]

log = logging.getLogger("backlog_worker.tracker.remote")

#: The real server drops requests over 65,536 bytes (request line + headers + body) unanswered.
DEFAULT_MAX_REQUEST_BYTES = 60_000

#: ``any_bearer``: the admin token, or a placeholder when none is set: NullTickets puts
#: ``GET /runs/{id}/events`` in its lease class, whose auth layer wants *some* Bearer value.
Auth = Literal["admin", "lease", "public", "any_bearer"]


@dataclass(frozen=True)
class RetrySettings:
    """How transient failures (``TrackerUnavailable``) are retried.

    ``attempts`` counts the first try (1 = no retry). Waits are exponential from ``initial_s``
    with full jitter, each at most ``max_wait_s``; retrying stops once ``budget_s`` seconds have
    passed since the first try. Every retry of one logical call reuses its idempotency key and
    body bytes.
    """

    attempts: int = 6
    initial_s: float = 0.1
    max_wait_s: float = 5.0
    budget_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"retry attempts must be >= 1, got {self.attempts}")
        for name in ("initial_s", "max_wait_s", "budget_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"retry {name} must be >= 0, got {getattr(self, name)}")


def quote_segment(value: str) -> str:
    """Percent-encode one path segment (``/`` included), as the server decodes segments."""
    return quote(value, safe="")


def encode_query(params: Mapping[str, object | None]) -> str:
    """Build a query string the way the server can read it.

    NullTickets does not percent-decode query values on ``/tasks``, ``/artifacts`` and
    ``/runs/{id}/events``, so ``:`` in cursors must travel as-is (httpx would send ``%3A`` and the
    server would answer ``invalid_cursor``). Only characters that would break the query are
    escaped. None values are left out.
    """
    parts = []
    for key, value in params.items():
        if value is None:
            continue
        parts.append(f"{key}={quote(str(value), safe=':@-._~!$()*,;/')}")
    return "&".join(parts)


_CODE_RE = re.compile(rb'"code"\s*:\s*"([A-Za-z0-9_]+)"')
_MESSAGE_RE = re.compile(rb'"message"\s*:\s*"(.*)"\s*}\s*}\s*$', re.DOTALL)


def parse_error_body(body: bytes) -> tuple[str | None, str, dict[str, Any]]:
    """Read ``{"error":{"code","message",...}}`` from an error answer, whatever shape it has.

    Returns (code, message, the whole ``error`` object). Two of the real server's error bodies
    are invalid JSON (an unescaped quote in the message): the code and message are then taken
    with a tolerant pattern. An empty or foreign body gives ``(None, <text excerpt>, {})``.
    """
    try:
        doc = json.loads(body)
    except ValueError:
        code_match = _CODE_RE.search(body)
        msg_match = _MESSAGE_RE.search(body)
        code = code_match.group(1).decode() if code_match else None
        if msg_match:
            message = msg_match.group(1).decode("utf-8", "replace")
        else:
            message = body[:200].decode("utf-8", "replace").strip() or "(empty body)"
        return code, message, {}
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        code = err.get("code") if isinstance(err.get("code"), str) else None
        message = err.get("message") if isinstance(err.get("message"), str) else ""
        return code, message or (code or "(no message)"), err
    return None, body[:200].decode("utf-8", "replace").strip() or "(empty body)", {}


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def error_from_response(
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    *,
    what: str,
    lease_route: bool,
) -> TrackerError:
    """Map an error answer to the exception tree: status first, then ``error.code``.

    ``what`` names the request (``"POST /tasks"``); ``lease_route`` marks the routes
    authenticated by the lease token, where 404/410 (and 401: the token no longer matches a
    lease) mean the lease is lost.
    """
    code, message, err = parse_error_body(body)
    # The tracker's own message, unchanged, when it gave one: the worker sees the same text
    # from the served tracker as from the embedded one. Without one, say what failed.
    text = message if code is not None else f"{what}: {status}: {message}"
    if lease_route and status in (404, 410):
        return LeaseLost(text, code=code or ("expired" if status == 410 else "not_found"))
    if lease_route and status == 401:
        return LeaseLost(text, code="invalid_token")
    if status == 409:
        return Conflict(text, code=code)
    if status == 400 and code == "invalid_transition":
        allowed = err.get("allowed")
        names = [a for a in allowed if isinstance(a, str)] if isinstance(allowed, list) else []
        return InvalidTransition(text, code=code, allowed=names)
    if status == 400:
        return ValidationFailed(text, code=code)
    if status == 404:
        return NotFound(text, code=code)
    if status == 429:
        retry_after: float | None = None
        try:
            retry_after = float(headers.get("retry-after", ""))
        except ValueError:
            retry_after = None
        return BacklogFull(
            text,
            role=str(err.get("role", "")),
            depth=_int_or(err.get("depth"), -1),
            cap=_int_or(err.get("cap"), -1),
            code=code,
            retry_after_s=retry_after,
        )
    if status in (401, 403):
        return TokenRefused(
            f"{what}: {status} {text} (the tracker refused the api token: check tracker.api_token)",
            code=code or "unauthorized",
            status=status,
            detail=f"{what}: {message}",
        )
    if status == 413:
        return ValidationFailed(text, code=code or "request_too_large")
    if status == 501:
        return Unsupported(text, code=code)
    if status >= 500:
        return TrackerUnavailable(
            f"{what}: {status} {code or 'error'}: {message}", code=code or "server_error"
        )
    return TrackerRejected(text, code=code or f"http_{status}")


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, built once per process (building one costs ~50-200 ms,
    which every tracker instance and every short-lived CLI call would otherwise pay)."""
    return httpx.create_ssl_context()


class HttpCore:
    """Sends one logical request (with its retries) and returns the successful response."""

    def __init__(
        self,
        url: str,
        *,
        api_token: str | None,
        timeout_s: float,
        connect_timeout_s: float,
        retry: RetrySettings,
        max_request_bytes: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._api_token = api_token
        self.retry = retry
        #: The served tracker's ``X-Rail-Generation`` last seen (its count of work-making
        #: writes); ``wait_for_work`` sends it so a write that raced with the wait still wakes it.
        self.generation: str | None = None
        self.max_request_bytes = max_request_bytes
        self.timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._client = httpx.AsyncClient(
            base_url=url,
            timeout=self.timeout,
            # One connection per request: nothing may sit idle against a single-threaded server.
            limits=httpx.Limits(max_keepalive_connections=0, max_connections=100),
            headers={"Connection": "close", "Accept": "application/json"},
            transport=transport,
            verify=_tls_context(),
            follow_redirects=False,
            trust_env=False,
        )

    async def aclose(self) -> None:
        """Close the client. Idempotent."""
        await self._client.aclose()

    def _headers(
        self, auth: Auth, lease_token: str | None, idempotency_key: str | None, has_body: bool
    ) -> dict[str, str]:
        headers: dict[str, str] = {}
        if auth == "lease":
            if not lease_token:
                raise ValidationFailed("a lease route needs the lease token", code="no_token")
            # The lease token *replaces* the admin token: never both.
            headers["Authorization"] = f"Bearer {lease_token}"
        elif auth in ("admin", "any_bearer") and self._api_token:
            headers["Authorization"] = f"Bearer {self._api_token}"
        elif auth == "any_bearer":
            headers["Authorization"] = "Bearer -"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        if has_body:
            headers["Content-Type"] = "application/json"
        return headers

    def build(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None,
        auth: Auth,
        lease_token: str | None = None,
        idempotency_key: str | None = None,
        read_timeout_s: float | None = None,
    ) -> httpx.Request:
        """Build the request and refuse it (``ValidationFailed``) when it is over the limit."""
        headers = self._headers(auth, lease_token, idempotency_key, body is not None)
        timeout = self.timeout
        if read_timeout_s is not None:
            timeout = httpx.Timeout(
                read_timeout_s,
                connect=self.timeout.connect,
                write=self.timeout.write,
                pool=self.timeout.pool,
            )
        request = self._client.build_request(
            method, path, content=body, headers=headers, timeout=timeout
        )
        size = request_size(request)
        if size > self.max_request_bytes:
            raise ValidationFailed(
                f"{method} {path.split('?')[0]}: request of {size} bytes is over the "
                f"{self.max_request_bytes}-byte limit (the NullTickets server drops requests "
                "over 64 KiB without answering); make the payload smaller",
                code="request_too_large",
            )
        return request

    async def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        auth: Auth = "admin",
        lease_token: str | None = None,
        idempotency_key: str | None = None,
        lease_route: bool = False,
        read_timeout_s: float | None = None,
        retry: bool = True,
    ) -> httpx.Response:
        """Send with retries on ``TrackerUnavailable``; return a 2xx response or raise.

        The same request (bytes, idempotency key) is sent on every retry.
        """
        request = self.build(
            method,
            path,
            body=body,
            auth=auth,
            lease_token=lease_token,
            idempotency_key=idempotency_key,
            read_timeout_s=read_timeout_s,
        )
        what = f"{method} {path.split('?')[0]}"
        if not retry or self.retry.attempts <= 1:
            return await self._send_once(request, what, lease_route)
        retrying = AsyncRetrying(
            sleep=anyio.sleep,
            stop=stop_after_attempt(self.retry.attempts) | stop_after_delay(self.retry.budget_s),
            wait=wait_random_exponential(
                multiplier=self.retry.initial_s, max=self.retry.max_wait_s
            ),
            retry=retry_if_exception_type(TrackerUnavailable),
            before_sleep=_log_retry(what),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._send_once(request, what, lease_route)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    async def _send_once(
        self, request: httpx.Request, what: str, lease_route: bool
    ) -> httpx.Response:
        try:
            response = await self._client.send(request)
            try:
                await response.aread()
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            raise TrackerUnavailable(
                f"{what}: no answer within the timeout ({type(exc).__name__})", code="timeout"
            ) from exc
        except httpx.TransportError as exc:
            raise TrackerUnavailable(
                f"{what}: connection failed or closed without an answer ({type(exc).__name__}: "
                f"{exc}); the server is down or busy, or dropped a request it found too large",
                code="connection_error",
            ) from exc
        generation = response.headers.get("x-rail-generation")
        if generation is not None:
            self.generation = generation
        if response.status_code >= 400:
            raise error_from_response(
                response.status_code,
                response.content,
                response.headers,
                what=what,
                lease_route=lease_route,
            )
        return response


def request_size(request: httpx.Request) -> int:
    """Bytes of the request on the wire: request line, headers and body."""
    line = len(request.method) + len(request.url.raw_path) + len(" HTTP/1.1\r\n") + 1
    headers = sum(len(k) + len(v) + 4 for k, v in request.headers.raw)
    body = int(request.headers.get("content-length", "0") or 0)
    return line + headers + 2 + body


def _log_retry(what: str) -> Any:
    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s failed (attempt %d): %s; retrying in %.2fs",
            what,
            state.attempt_number,
            exc,
            wait,
            extra={"action": "tracker_retry"},
        )

    return before_sleep


def check_json(value: Any, what: str) -> Any:
    """Refuse (``ValidationFailed`` naming ``what``) a value that is not plain JSON.

    Sets, bytes, arbitrary objects and NaN would otherwise be coerced or fail mid-request; a
    value nested past :data:`~tracker_client.jsonlimits.MAX_JSON_DEPTH` is refused here as the
    served tracker would refuse it (and before it could overflow the encoder).
    """
    check_json_limits(value, what)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"{what} must be JSON: {exc}", code="invalid_json") from exc
    return value


def dumps(value: Any) -> bytes:
    """Compact, deterministic JSON bytes (a retry must send identical bytes)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def loads(response: httpx.Response, what: str) -> Any:
    """Parse a success body; a body that is not JSON is a transient, broken answer."""
    try:
        return json.loads(response.content)
    except ValueError as exc:
        raise TrackerUnavailable(
            f"{what}: the tracker answered {response.status_code} with a body that is not JSON",
            code="invalid_response",
        ) from exc
