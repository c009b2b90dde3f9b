"""A lean HTTP/1.1 transport for an ``http://`` tracker: what httpcore does for it, in less CPU.

:class:`~tracker_client.nulltickets.transport.HttpTransport` hands this transport to its
``httpx.AsyncClient`` when the tracker's URL is ``http://`` and no transport was injected
(``https://`` keeps httpx's own, verified one; tests inject ASGI and fault transports). A worker
draining a rail spends most of its CPU per request in the HTTP client; httpcore's general
machinery (a pool with per-checkout socket polls through anyio's extra attributes, h11's event
objects, headers and body written in two sends) is what this room replaces, for the one kind of
exchange the client makes: a request whose body is bytes already, an answer read whole.

* Connections are opened with ``anyio.connect_tcp`` (asyncio, uvloop and trio alike; their
  streams set ``TCP_NODELAY``). Each request is written in ONE send: request line, headers
  (httpx's, so ``Host``, ``Content-Length`` and the credentials are exactly what the client
  built) and body.
* The answer is parsed by httptools' ``HttpResponseParser`` (llhttp, a C parser: already a
  dependency, as ``tracker serve``'s uvicorn parser; h11, httpcore's parser, is pure Python):
  ``Content-Length``, chunked and read-until-close bodies.
* ``keep_alive=False`` (a plain NullTickets server): one connection per request, closed after
  its answer (the client sends ``Connection: close``). ``keep_alive=True``: idle connections in a
  small LIFO pool, dropped after ``expiry_s`` idle; one the server closed (or that has bytes
  nobody asked for) is found at checkout by one non-blocking ``poll`` on its descriptor, and
  one closed under a request fails as httpx's transport fails (the caller resends a read).
* Timeouts come from the request's ``extensions["timeout"]`` (connect, read per receive,
  write); every failure is raised as the ``httpx`` exception httpx's transport raises for it
  (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``, ``WriteTimeout``, ``ReadError``,
  ``WriteError``, ``RemoteProtocolError``), so ``TrackerUnavailable`` stays mapped in one place.

It touches sockets only; it knows nothing of credentials, limits or operations. It never
imports httpcore or ``ssl``.
"""

from __future__ import annotations

import os
import select
import time

import anyio
import anyio.abc
import httptools
import httpx

from tracker_client.nulltickets.codec import DEFAULT_MAX_ANSWER_BYTES, answer_too_large

__all__ = ["DISABLE_ENV", "LeanTransport", "lean_enabled"]

#: Set to ``httpx`` to use httpx's own transport for ``http://`` too (an A/B switch for
#: measuring, and an escape hatch should this transport misbehave somewhere).
DISABLE_ENV = "TRACKER_CLIENT_HTTP_TRANSPORT"

#: Bytes an answer's status line and headers may take (h11's limit is 16 KiB on headers).
MAX_HEAD_BYTES = 64 * 1024
_RECEIVE = 65536


def lean_enabled() -> bool:
    """False when :data:`DISABLE_ENV` asks for httpx's own transport."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() != "httpx"


class _Answer:
    """httptools' callbacks for one answer: status, headers, body parts, completion.

    An informational (1xx) answer before it is skipped, as httpx's transport skips it; bytes
    after it (a second answer nobody asked for) only mark the connection unfit for reuse.
    ``head``: the answer to a HEAD request ends with its headers."""

    __slots__ = (
        "body",
        "body_bytes",
        "complete",
        "extra",
        "head",
        "headers",
        "headers_done",
        "parser",
        "reason",
        "status",
        "version",
    )

    def __init__(self, head: bool) -> None:
        self.head = head
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.body_bytes = 0
        self.reason = b""
        self.headers_done = False
        self.complete = False
        self.extra = False
        self.status = 0
        self.version = b"HTTP/1.1"
        #: Set while parsing (for the status code), cleared after: no reference cycle left.
        self.parser: httptools.HttpResponseParser | None = None

    def on_message_begin(self) -> None:
        self.extra = self.extra or self.complete

    def on_status(self, status: bytes) -> None:
        if not self.complete:
            self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.complete:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        self.headers_done = True
        if self.head:
            self.complete = True

    def on_body(self, body: bytes) -> None:
        if not self.complete:
            self.body.append(body)
            self.body_bytes += len(body)

    def on_message_complete(self) -> None:
        if self.complete:
            return
        code = self.parser.get_status_code() if self.parser is not None else 200
        if 100 <= code < 200 and code != 101:
            self.headers, self.body, self.reason, self.headers_done = [], [], b"", False
            self.body_bytes = 0
            return
        self.complete = True


class _Connection:
    """One TCP connection: its stream, its descriptor (for the idle check), when it idled."""

    __slots__ = ("fd", "idle_since", "stream")

    def __init__(self, stream: anyio.abc.SocketStream, fd: int) -> None:
        self.stream = stream
        self.fd = fd
        self.idle_since = 0.0

    def is_usable(self) -> bool:
        """True when nothing is readable on an idle connection: no EOF, no reset, no stray
        bytes (each of which means the server is done with it). One non-blocking poll."""
        if self.fd < 0:
            return False
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        return not poller.poll(0)


def _timeouts(request: httpx.Request) -> tuple[float | None, float | None, float | None]:
    timeout: dict[str, float | None] = request.extensions.get("timeout") or {}
    return timeout.get("connect"), timeout.get("read"), timeout.get("write")


def _head(request: httpx.Request, body: bytes) -> bytes:
    """The request as it goes on the wire: request line, headers, blank line, body."""
    url = request.url
    target = url.raw_path
    lines = [request.method.encode("ascii"), b" ", target, b" HTTP/1.1\r\n"]
    for name, value in request.headers.raw:
        lines += (name, b": ", value, b"\r\n")
    lines += (b"\r\n", body)
    return b"".join(lines)


class LeanTransport(httpx.AsyncBaseTransport):
    """httpx transport for plain-HTTP trackers: one send per request, httptools parsing, a LIFO
    pool of idle connections when ``keep_alive`` (else one connection per request)."""

    def __init__(
        self,
        *,
        keep_alive: bool,
        max_idle: int = 32,
        expiry_s: float = 2.0,
        max_answer_bytes: int | None = None,
    ) -> None:
        self._keep_alive = keep_alive
        #: A larger answer body is refused as it arrives (``AnswerRefused``), never held whole.
        self._max_answer = max_answer_bytes or DEFAULT_MAX_ANSWER_BYTES
        self._max_idle = max_idle
        self._expiry_s = expiry_s
        #: Idle connections per origin, oldest first (taken from the end: LIFO).
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and read its whole answer (raised as httpx's exceptions)."""
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"the lean transport speaks http://, not {url}")
        origin = (url.host, url.port or 80)
        connect_s, read_s, write_s = _timeouts(request)
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        data = _head(request, body)
        connection = await self._checkout(origin)
        if connection is None:
            connection = await self._connect(request, origin, connect_s)
        try:
            await self._write(request, connection, data, write_s)
            answer, keep = await self._read(request, connection, read_s, self._max_answer)
        except BaseException:
            await _close(connection)
            raise
        if keep and self._keep_alive and not self._closed:
            await self._checkin(origin, connection)
        else:
            await _close(connection)
        return httpx.Response(
            answer.status,
            headers=answer.headers,
            stream=httpx.ByteStream(b"".join(answer.body)),
            extensions={"http_version": answer.version, "reason_phrase": answer.reason},
            request=request,
        )

    async def _checkout(self, origin: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        deadline = time.monotonic() - self._expiry_s
        while idle:
            connection = idle.pop()
            if connection.idle_since >= deadline and connection.is_usable():
                return connection
            stale = [connection]
            if connection.idle_since < deadline:
                # Older ones (below it) idled longer still.
                stale += idle
                idle.clear()
            for connection in stale:
                await _close(connection)
        return None

    async def _checkin(self, origin: tuple[str, int], connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        now = time.monotonic()
        connection.idle_since = now
        idle.append(connection)
        while idle and (len(idle) > self._max_idle or idle[0].idle_since < now - self._expiry_s):
            await _close(idle.pop(0))

    async def _connect(
        self, request: httpx.Request, origin: tuple[str, int], timeout_s: float | None
    ) -> _Connection:
        try:
            with anyio.fail_after(timeout_s):
                stream = await anyio.connect_tcp(*origin)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("timed out", request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        fd = -1
        if self._keep_alive:
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)  # noqa: S610 (anyio, not Django)
            fd = raw.fileno() if raw is not None else -1
        return _Connection(stream, fd)

    @staticmethod
    async def _write(
        request: httpx.Request, connection: _Connection, data: bytes, timeout_s: float | None
    ) -> None:
        try:
            with anyio.fail_after(timeout_s):
                await connection.stream.send(data)
        except TimeoutError as exc:
            raise httpx.WriteTimeout("timed out", request=request) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise httpx.WriteError(_cause(exc), request=request) from exc

    @staticmethod
    async def _read(
        request: httpx.Request, connection: _Connection, timeout_s: float | None, cap: int
    ) -> tuple[_Answer, bool]:
        answer = _Answer(request.method == "HEAD")
        parser = answer.parser = httptools.HttpResponseParser(answer)
        try:
            return await _receive(request, connection.stream, answer, parser, timeout_s, cap)
        finally:
            answer.parser = None

    async def aclose(self) -> None:
        """Close every idle connection; later requests are refused. Idempotent."""
        self._closed = True
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                await _close(connection)


async def _receive(
    request: httpx.Request,
    stream: anyio.abc.SocketStream,
    answer: _Answer,
    parser: httptools.HttpResponseParser,
    timeout_s: float | None,
    cap: int,
) -> tuple[_Answer, bool]:
    """Read until ``answer`` is complete; also whether the connection may serve another. A
    body over ``cap`` bytes is refused as soon as it is (``AnswerRefused``)."""
    seen = 0
    while not answer.complete:
        try:
            with anyio.fail_after(timeout_s):
                chunk = await stream.receive(_RECEIVE)
        except TimeoutError as exc:
            raise httpx.ReadTimeout("timed out", request=request) from exc
        except anyio.EndOfStream:
            return _at_eof(request, answer, parser, seen), False
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise httpx.ReadError(_cause(exc), request=request) from exc
        seen += len(chunk)
        try:
            parser.feed_data(chunk)
        except httptools.HttpParserError as exc:
            if answer.complete:  # bytes after the answer: it stands, the connection does not
                answer.extra = True
                break
            raise httpx.RemoteProtocolError(f"malformed answer: {exc}", request=request) from exc
        if not answer.headers_done and seen > MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError(
                f"answer headers over {MAX_HEAD_BYTES} bytes", request=request
            )
        if answer.body_bytes > cap:
            raise answer_too_large(f"{request.method} {request.url.path}", cap)
    _finish(answer, parser)
    keep = not (answer.extra or answer.head or _closes(answer) or answer.version != b"HTTP/1.1")
    return answer, keep


def _finish(answer: _Answer, parser: httptools.HttpResponseParser) -> _Answer:
    answer.status = parser.get_status_code()
    answer.version = b"HTTP/" + parser.get_http_version().encode()
    return answer


def _at_eof(
    request: httpx.Request, answer: _Answer, parser: httptools.HttpResponseParser, seen: int
) -> _Answer:
    """The server closed the connection: an answer whose body runs to the close is complete
    there; anything else is cut short (httpx's transport's messages)."""
    if not seen:
        raise httpx.RemoteProtocolError(
            "Server disconnected without sending a response.", request=request
        )
    if answer.headers_done:
        names = {name.lower() for name, _ in answer.headers}
        if b"content-length" not in names and b"transfer-encoding" not in names:
            return _finish(answer, parser)
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body", request=request
        )
    raise httpx.RemoteProtocolError("peer closed connection mid-headers", request=request)


def _closes(answer: _Answer) -> bool:
    for name, value in answer.headers:
        if name.lower() == b"connection" and b"close" in value.lower():
            return True
    return False


def _cause(exc: BaseException) -> str:
    """The OS error under an anyio stream error (what httpx's transport would name)."""
    inner = exc.__cause__ or exc.__context__ or exc
    return str(inner) or type(inner).__name__


async def _close(connection: _Connection) -> None:
    with anyio.CancelScope(shield=True):
        await connection.stream.aclose()
