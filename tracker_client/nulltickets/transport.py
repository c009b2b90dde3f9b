"""The HTTP layer of the NullTickets client: one request, its credentials, size guard and errors.

This is the module that sends over ``httpx``: the clients it sends on are built once by
:mod:`~tracker_client.nulltickets.connections` (TLS for ``https://``, none for ``http://``,
the pools' limits), and the bodies it
sends are bytes made by :mod:`~tracker_client.nulltickets.codec`. It implements the transport
half of what a robust NullTickets client must do (docs/guarantees/nulltickets.md):

* one TCP connection per request (no keep-alive pool: the real server is single-threaded and a
  connection left idle against it blocks every other client) and ``Connection: close``, until
  the server advertises the ``keep_alive`` extension (``tracker serve``): then a small pool of
  persistent connections (:meth:`HttpTransport.use_keep_alive`), idle ones dropped before the
  server's own keep-alive timeout; a read whose reused connection was closed under it is sent
  once more on a fresh one, a write is left to the caller's retry (same key, same bytes);
* explicit connect/read/write timeouts;
* bodies are bytes serialised once (so a retry sends the *same* bytes under the same
  ``Idempotency-Key``) and always carry ``Content-Length``, never chunked encoding;
* a size guard: a request over ``max_request_bytes`` is refused with ``ValidationFailed`` before
  it is sent, because the server drops requests over 64 KiB without any answer;
* the admin token on admin routes, the lease token *replacing* it on lease routes (there is no
  session-wide ``Authorization`` header to merge with);
* an error answer becomes an exception through the contract's error table
  (:func:`~tracker_client.contract.wire_errors.error_for`); resets and timeouts become
  ``TrackerUnavailable``.

It does not retry unless asked: only when its :class:`RetrySettings` allow more than one attempt
(an operator command, or a ``retry_attempts`` option) is a ``TrackerUnavailable`` retried, by
tenacity (exponential backoff with full jitter, a ceiling per wait and a total budget), with the
same key and bytes. It knows nothing of operations: :mod:`~tracker_client.nulltickets.wire`
turns an operation of the contract table into the method, path and credentials sent here.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import anyio
import httpx

from tracker_client.contract.wire_errors import error_for
from tracker_client.errors import TrackerUnavailable, ValidationFailed
from tracker_client.nulltickets.codec import answer_too_large
from tracker_client.nulltickets.connections import (
    KEEP_ALIVE_CONNECTIONS,
    KEEP_ALIVE_EXPIRY_S,
    http_client,
)
from tracker_client.nulltickets.options import (
    DEFAULT_MAX_REQUEST_BYTES,
    ClientOptions,
    RetrySettings,
)

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "Credentials",
    "HttpTransport",
    "RetrySettings",
    "request_size",
]

log = logging.getLogger("backlog_worker.tracker.remote")

#: Most URLs a transport keeps by path (:meth:`HttpTransport._url`): the operations' own paths
#: and those of the leases and tasks in flight.
URLS_KEPT = 256

#: Which ``Authorization`` a request carries: none (``public``), the api token (``admin``), the
#: lease token instead of it (``lease``), or ``any_bearer``: the api token, or a placeholder when
#: none is set (NullTickets puts ``GET /runs/{id}/events`` in its lease class, whose auth layer
#: wants *some* Bearer value).
Credentials = Literal["admin", "lease", "public", "any_bearer"]


class HttpTransport:
    """Sends one request (with retries only when its settings ask) and returns a 2xx answer."""

    def __init__(
        self, options: ClientOptions, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._api_token = options.api_token
        #: How a ``TrackerUnavailable`` is retried (:data:`~.options.NO_RETRY`: it is not).
        self.retry = options.retry
        #: The served tracker's ``X-Rail-Generation`` last seen (its count of work-making
        #: writes); ``wait_for_work`` sends it so a write that raced with the wait still wakes it.
        self.generation: str | None = None
        #: The size guard; the server's own advertised limit replaces it once known.
        self.max_request_bytes = options.max_request_bytes
        #: The largest answer body read (``AnswerRefused`` past it, as it arrives).
        self.max_answer_bytes = options.max_answer_bytes
        self.timeout = httpx.Timeout(options.timeout_s, connect=options.connect_timeout_s)
        self._client = http_client(
            options.url,
            transport,
            # One connection per request: nothing may sit idle against a single-threaded server.
            httpx.Limits(max_keepalive_connections=0, max_connections=100),
            timeout=self.timeout,
            headers={"Connection": "close", "Accept": "application/json"},
        )
        self._options = options
        self._transport = transport
        #: The client's timeouts as a request carries them (httpx's ``timeout`` extension).
        self._timeouts: dict[str, float | None] = self.timeout.as_dict()
        #: URLs of paths already sent, by path (:meth:`_url`).
        self._urls: dict[str, httpx.URL] = {}
        #: The keep-alive client once the server advertised ``keep_alive`` (else None).
        self._pooled: httpx.AsyncClient | None = None

    @property
    def keep_alive(self) -> bool:
        """True once requests go over persistent connections."""
        return self._pooled is not None

    def use_keep_alive(self, enabled: bool) -> None:
        """Send the next requests over persistent connections (``enabled``), or one connection
        per request. Called by discovery with what ``/health`` advertised."""
        if not enabled or self._pooled is not None:
            return
        self._urls.clear()  # the other client's (the same base URL: cleared all the same)
        self._pooled = http_client(
            self._options.url,
            self._transport,
            httpx.Limits(
                max_keepalive_connections=KEEP_ALIVE_CONNECTIONS,
                max_connections=100,
                keepalive_expiry=KEEP_ALIVE_EXPIRY_S,
            ),
            timeout=self.timeout,
            headers={"Accept": "application/json"},
        )

    async def aclose(self) -> None:
        """Close the client (and its persistent connections). Idempotent."""
        await self._client.aclose()
        if self._pooled is not None:
            await self._pooled.aclose()

    def _headers(
        self,
        base: httpx.Headers,
        auth: Credentials,
        lease_token: str | None,
        key: str | None,
        has_body: bool,
    ) -> list[tuple[bytes, bytes]]:
        """The request's headers: the client's own (``base``), then the call's."""
        headers = list(base.raw)
        if auth == "lease":
            if not lease_token:
                raise ValidationFailed("a lease route needs the lease token", code="no_token")
            # The lease token *replaces* the admin token: never both.
            headers.append((b"Authorization", f"Bearer {lease_token}".encode()))
        elif auth in ("admin", "any_bearer") and self._api_token:
            headers.append((b"Authorization", f"Bearer {self._api_token}".encode()))
        elif auth == "any_bearer":
            headers.append((b"Authorization", b"Bearer -"))
        if key is not None:
            headers.append((b"Idempotency-Key", key.encode()))
        if has_body:
            headers.append((b"Content-Type", b"application/json"))
        return headers

    def build(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None,
        auth: Credentials,
        lease_token: str | None = None,
        idempotency_key: str | None = None,
        read_timeout_s: float | None = None,
    ) -> httpx.Request:
        """Build the request and refuse it (``ValidationFailed``) when it is over the limit.

        The request is made as ``client.build_request`` makes it (the client's URL and default
        headers, then the call's), from the URL of ``path`` it made once (:meth:`_url`): its
        merging of URLs, headers, cookies and query parameters, none of which vary here,
        cost ~60 us of CPU per request against ~14 (and more on a cold cache: the producer's
        create in the pickup latency, docs/benchmarks.md)."""
        client = self._pooled or self._client
        headers = self._headers(
            client.headers, auth, lease_token, idempotency_key, body is not None
        )
        timeout = self._timeouts if read_timeout_s is None else self._long_poll(read_timeout_s)
        request = httpx.Request(
            method,
            self._url(client, path),
            headers=headers,
            content=body,
            extensions={"timeout": timeout},
        )
        size = request_size(request, body)
        if size > self.max_request_bytes:
            raise ValidationFailed(
                f"{method} {path.split('?')[0]}: request of {size} bytes is over the "
                f"{self.max_request_bytes}-byte limit (the NullTickets server drops requests "
                "over 64 KiB without answering); make the payload smaller",
                code="request_too_large",
            )
        return request

    def _url(self, client: httpx.AsyncClient, path: str) -> httpx.URL:
        """``path`` on ``client``'s base URL, as ``client.build_request`` merges it; the URLs
        of paths without a query (the operations' own, a lease's, a task's) are kept, at
        most :data:`URLS_KEPT` of them (then the oldest go)."""
        urls = self._urls
        url = urls.get(path)
        if url is None:
            url = client.build_request("GET", path).url
            if "?" not in path:
                if len(urls) >= URLS_KEPT:
                    del urls[next(iter(urls))]
                urls[path] = url
        return url

    def _long_poll(self, read_timeout_s: float) -> dict[str, float | None]:
        """The timeouts of a long poll: its own read timeout, the client's others."""
        return {**self._timeouts, "read": read_timeout_s}

    async def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        auth: Credentials = "admin",
        lease_token: str | None = None,
        idempotency_key: str | None = None,
        read_timeout_s: float | None = None,
        retry: bool = True,
    ) -> httpx.Response:
        """Send ``method path``; return its 2xx answer or raise the contract's exception.

        ``auth="lease"`` marks a lease route (404/410/401 there mean the lease is lost).
        ``retry=False`` tries once whatever the settings say (a long poll, a write whose failure
        must be looked at first); with retries, every try sends the same bytes and key.
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
        lease_route = auth == "lease"
        if not retry or not self.retry.retries:
            return await self._send_once(request, what, lease_route)
        return await self._send_retrying(request, what, lease_route)

    async def _send_retrying(
        self, request: httpx.Request, what: str, lease_route: bool
    ) -> httpx.Response:
        # Imported here: a client that is never asked to retry never loads tenacity.
        from tenacity import (
            AsyncRetrying,
            retry_if_exception_type,
            stop_after_attempt,
            stop_after_delay,
            wait_random_exponential,
        )

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

    async def _exchange(self, request: httpx.Request) -> httpx.Response:
        pooled = self._pooled
        cap = self.max_answer_bytes
        if pooled is None or request.headers.get("connection") == "close":
            return await self._read(self._client, request, cap)
        try:
            return await self._read(pooled, request, cap)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            # A reused connection closed under the request (the server's idle timeout, a
            # restart). A read is sent again on a fresh connection; a write is not (whether it
            # was applied is unknown): it fails as TrackerUnavailable, and the caller's retry
            # sends it again with the same Idempotency-Key, as on a closing connection.
            if request.method != "GET":
                raise
            return await self._read(pooled, request, cap)

    @staticmethod
    async def _read(client: httpx.AsyncClient, request: httpx.Request, cap: int) -> httpx.Response:
        """The answer with its whole body, read as a stream: a body (decoded) over ``cap``
        bytes is refused as it arrives (``AnswerRefused``), never held whole."""
        response = await client.send(request, stream=True)
        try:
            declared = response.headers.get("content-length", "")
            what = f"{request.method} {request.url.path}"
            if declared.isdigit() and int(declared) > cap:
                raise answer_too_large(what, cap)
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > cap:
                    raise answer_too_large(what, cap)
                chunks.append(chunk)
        finally:
            await response.aclose()
        # The body is read: a new answer holds its bytes (httpx's streamed one points back at
        # its client: a reference cycle per request that only the cyclic collector frees).
        return httpx.Response(
            response.status_code,
            headers=response.headers,  # as they came, as an answer read whole keeps them
            content=b"".join(chunks),
            request=request,
            extensions=response.extensions,
        )

    async def _send_once(
        self, request: httpx.Request, what: str, lease_route: bool
    ) -> httpx.Response:
        try:
            response = await self._exchange(request)
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
            raise error_for(
                response.status_code,
                response.content,
                response.headers,
                what,
                lease_route=lease_route,
            )
        return response


def request_size(request: httpx.Request, body: bytes | None) -> int:
    """Bytes of ``request`` on the wire: request line, headers and ``body`` (its content)."""
    line = len(request.method) + len(request.url.raw_path) + len(" HTTP/1.1\r\n") + 1
    headers = sum(len(k) + len(v) + 4 for k, v in request.headers.raw)
    return line + headers + 2 + (len(body) if body is not None else 0)


def _log_retry(what: str) -> Any:
    from tenacity import RetryCallState

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
