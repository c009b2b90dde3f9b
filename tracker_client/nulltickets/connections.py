"""The connections of the NullTickets client: which ``httpx.AsyncClient`` a request is sent on.

:class:`~tracker_client.nulltickets.transport.HttpTransport` sends every request on a client
built here once (one for ``Connection: close`` requests, one for persistent connections once the
server advertises ``keep_alive``). What is decided here, and only at build time: TLS (a context
for ``https://``, built once per process; none at all for ``http://``, where an SSL context
would cost ~6-7 MiB of RSS for nothing: httpx's own transport without an SSL context carries
``http://``) and the pool's limits. It stands apart from the transport because none of it is
looked at per request.

``http://`` goes through httpx's own transport (httpcore's pool), whose connections on an
asyncio loop are the loop's own transport (:class:`_LoopStream`, behind httpcore's public
:class:`httpcore.AsyncNetworkBackend`): httpcore's anyio backend ran each socket read and write
in a ``fail_after`` scope (a cancel scope, a timer armed and disarmed, a pass of the loop). HTTP
itself stays httpx's, httpcore's and h11's. A hand-written HTTP/1.1
transport did it for a while, in 1.35-1.4x less worker CPU per task, but was worth only
1.18-1.20x tasks/s to a worker draining a served rail (``python -m bench.transport``, see
docs/benchmarks.md): under the 1.3x that would pay for keeping an HTTP client of our own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import select
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio
import httpcore
import httpx
from httpcore import SOCKET_OPTION

__all__ = [
    "KEEP_ALIVE_CONNECTIONS",
    "KEEP_ALIVE_EXPIRY_S",
    "OneWriteRequests",
    "PlainHttpTransport",
    "client_transport",
    "http_client",
    "tls_context",
]

#: Idle persistent connections are dropped after this (the served tracker closes them at 5 s:
#: the client lets go first, so a request is seldom sent on a connection the server is closing).
KEEP_ALIVE_EXPIRY_S = 2.0
#: Persistent connections kept idle at most (a worker's slots share them).
KEEP_ALIVE_CONNECTIONS = 32
#: Whether this platform has ``select.poll`` (not Windows: there httpcore's own check is used).
_POLL = hasattr(select, "poll")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, built once per process (building one costs ~50-200 ms,
    which every tracker instance and every short-lived CLI call would otherwise pay). Only an
    ``https://`` tracker builds it: see :class:`PlainHttpTransport`."""
    return httpx.create_ssl_context()


class PlainHttpTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport for an ``http://`` tracker, built without an SSL context.

    ``httpx.AsyncHTTPTransport`` makes an ``ssl.SSLContext`` even for plain HTTP (with
    ``verify=False`` too), and OpenSSL's context costs ~6-7 MiB of RSS (certifi's bundle on top):
    a worker on a plain-http rail paid it for nothing. httpcore's pool builds its (verifying)
    default context only when it opens a TLS connection, so it is handed none. Everything else
    (request/response mapping, httpcore errors mapped to httpx's) is the parent's, which reaches
    the pool as ``self._pool``: the test that counts SSL contexts catches a release that moves it.
    """

    def __init__(self, limits: httpx.Limits) -> None:
        # The parent's __init__ is the part that builds the context: its pool is built here.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=None,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=OneWriteRequests(),
        )


class OneWriteRequests(httpcore.AsyncNetworkBackend):
    """The ``http://`` transport's network backend: on an asyncio loop its connections are the
    loop's own transport (:class:`_LoopStream`), under trio httpcore's anyio backend's
    (:class:`_GatheredWrites`); both send what is written with the next read, so a request's
    head and body leave in one write.

    httpcore writes a request's head and its body separately (with a pass of the event loop
    between), so each goes out as a TCP segment of its own: the server is woken for the head,
    starts the request and waits for its body. In the pickup bench the served tracker read a
    create's body 0.8 ms after its head, on two cores shared with the worker and the producer
    (docs/benchmarks.md, "Pickup latency"). HTTP/1.1 without ``Expect: 100-continue`` (which
    this client never sends) reads nothing before its request is written whole, so the first
    read after the writes is where they are sent. Used for ``http://`` only (TLS connections
    write through ``start_tls``'s stream)."""

    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """A connection on the running asyncio loop's own transport (:class:`_LoopStream`), or
        of httpcore's backend with its writes gathered on another loop (trio)."""
        loop = _asyncio_loop()
        if loop is None:
            stream = await self._backend.connect_tcp(
                host,
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )
            return _GatheredWrites(stream)
        local = None if local_address is None else (local_address, 0)
        return await _LoopStream.connect(
            loop,
            lambda reader: loop.create_connection(lambda: reader, host, port, local_addr=local),
            timeout,
            socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """As :meth:`connect_tcp`, over a Unix socket."""
        loop = _asyncio_loop()
        if loop is None:
            stream = await self._backend.connect_unix_socket(
                path, timeout=timeout, socket_options=socket_options
            )
            return _GatheredWrites(stream)
        return await _LoopStream.connect(
            loop,
            lambda reader: loop.create_unix_connection(lambda: reader, path),
            timeout,
            socket_options,
        )

    async def sleep(self, seconds: float) -> None:
        """httpcore's backend's."""
        await self._backend.sleep(seconds)


class _GatheredWrites(httpcore.AsyncNetworkStream):
    """One connection of :class:`OneWriteRequests`: writes are kept until the next read (or
    ``start_tls``), then sent as one."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._pending: list[bytes] = []
        self._timeout: float | None = None
        #: The socket's readiness poll, made at the first ``is_readable`` (None: not yet).
        self._readable: select.poll | None = None
        self._sock: socket.socket | None = None
        self._closed = False

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Keep ``buffer`` for the next read (an empty one is nothing to send)."""
        if buffer:
            self._pending.append(buffer)
            self._timeout = timeout

    async def _flush(self) -> None:
        """Send what was written, as httpcore would have: a write error is left for the read
        that follows to meet (a server may answer a request it stopped reading)."""
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        with contextlib.suppress(httpcore.WriteError):
            await self._stream.write(data, timeout=self._timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        """What was written goes first."""
        await self._flush()
        return await self._stream.read(max_bytes, timeout=timeout)

    async def aclose(self) -> None:
        """Close (what was never read after is dropped with the connection)."""
        self._pending.clear()
        self._closed, self._readable, self._sock = True, None, None
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
    ) -> httpcore.AsyncNetworkStream:
        """What was written goes first; the TLS stream writes through."""
        await self._flush()
        return await self._stream.start_tls(ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> Any:
        """httpcore's stream's (the socket, whether it is readable: a dropped idle one);
        ``is_readable`` answered by a poll of the socket kept for the connection."""
        if info == "is_readable" and _POLL:
            return self._is_readable()
        return self._stream.get_extra_info(info)

    def _is_readable(self) -> bool:
        """Whether the socket has something to read, or is gone: for an idle connection, the
        server closed it. httpcore asks it of every idle connection as each request starts
        and ends; its backend makes a poll object and reads the stream's attributes each time
        (~4.8 us against ~0.3 with the poll kept: several idle connections, twice per
        request, on a worker's pickup path; docs/benchmarks.md, "Pickup latency")."""
        sock, poll = self._sock, self._readable
        if sock is None or poll is None:
            if self._closed:
                return True
            sock = self._stream.get_extra_info("socket")
            if sock is None or sock.fileno() == -1:
                return True  # as httpcore's backend answers
            poll = select.poll()
            poll.register(sock, select.POLLIN)
            self._sock, self._readable = sock, poll
        if sock.fileno() == -1:  # closed under us: its number may be another's now
            return True
        return bool(poll.poll(0))


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop (uvloop's too), or None under another backend (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


#: A connection's received bytes past which its transport stops reading until they are read.
_READ_HIGH = 1024 * 1024


class _Reader(asyncio.Protocol):
    """The asyncio protocol of one :class:`_LoopStream`: what arrives is kept, a read waiting
    for it is woken, and the connection's end and flow control are recorded."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: The connection's transport, once connected (reading pauses through it).
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        #: The peer ended its side, or the connection is gone (what is buffered is still read).
        self.ended = False
        #: Why the connection was lost (a reset), if it was.
        self.error: Exception | None = None
        self.paused = False
        self.reading_paused = False
        #: The read or write waiting to be woken (its future's result: False when timed out).
        self.waiter: asyncio.Future[bool] | None = None

    def data_received(self, data: bytes) -> None:
        """Keep ``data`` (reading pauses past :data:`_READ_HIGH` unread bytes)."""
        self.buffer += data
        if len(self.buffer) > _READ_HIGH and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        """The peer closed its side: reads end once the buffer is read (the transport
        closes)."""
        self.ended = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection ended (``exc``: reset, or None)."""
        self.ended = True
        self.error = exc
        self._wake()

    def pause_writing(self) -> None:
        """The transport's write buffer is full: a write waits for :meth:`resume_writing`."""
        self.paused = True

    def resume_writing(self) -> None:
        """Room to write again."""
        self.paused = False
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    async def wait(self, limit_s: float | None) -> bool:
        """Wait to be woken, at most ``limit_s`` seconds (False: the time ran out first)."""
        waiter = self.waiter = self.loop.create_future()
        timer = None if limit_s is None else self.loop.call_later(limit_s, _expire, waiter)
        try:
            woken: bool = await waiter
            return woken
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class _LoopStream(httpcore.AsyncNetworkStream):
    """One connection of :class:`OneWriteRequests` on an asyncio loop: the loop's own
    transport and a buffering protocol (:class:`_Reader`), with httpcore's timeouts.

    httpcore's backend runs every read and write through anyio's stream in a
    ``fail_after`` scope: a cancel scope, a timer armed and disarmed and a pass of the loop
    per socket operation, several ``current_task`` look-ups each (a ``getpid`` system call
    apiece on CPython 3.11). A read here returns what has arrived at once; only a read that
    must wait arms a timer, for the same timeout. Writes are kept until the next read and
    sent in one write, as :class:`_GatheredWrites` sends them; a write that finds the
    transport's buffer full waits, within its timeout, for room."""

    def __init__(self, reader: _Reader, transport: asyncio.Transport) -> None:
        self._reader = reader
        self._transport = transport
        self._pending: list[bytes] = []
        self._timeout: float | None = None
        #: The socket's readiness poll (``is_readable``), where the platform has one.
        self._poll: select.poll | None = None
        sock = transport.get_extra_info("socket")
        if _POLL and sock is not None:
            self._poll = select.poll()
            self._poll.register(sock, select.POLLIN)

    @staticmethod
    async def connect(
        loop: asyncio.AbstractEventLoop,
        open_with: Callable[[_Reader], Awaitable[tuple[asyncio.Transport, _Reader]]],
        limit_s: float | None,
        socket_options: Iterable[SOCKET_OPTION] | None,
    ) -> _LoopStream:
        """A connection opened by ``open_with(protocol)`` within ``limit_s`` (httpcore's
        ``ConnectTimeout``/``ConnectError`` otherwise), ``socket_options`` set on it."""
        reader = _Reader(loop)
        try:
            with anyio.fail_after(limit_s):
                transport, _ = await open_with(reader)
            reader.transport = transport
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc) or "connect timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return _LoopStream(reader, transport)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Keep ``buffer`` for the next read (an empty one is nothing to send)."""
        if buffer:
            self._pending.append(buffer)
            self._timeout = timeout

    async def _flush(self) -> None:
        """Send what was written. A connection already closed is left for the read that
        follows to meet (a server may answer a request it stopped reading)."""
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        reader = self._reader
        if self._transport.is_closing():
            return
        self._transport.write(data)
        while reader.paused and not reader.ended:
            if not await reader.wait(self._timeout):
                raise httpcore.WriteTimeout("no room to write within the timeout")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        """What has arrived (up to ``max_bytes``), waiting at most ``timeout`` for some; what
        was written goes first. b"" once the peer closed and all is read."""
        await self._flush()
        reader = self._reader
        while not reader.buffer:
            if reader.ended:
                if reader.error is not None:
                    raise httpcore.ReadError(str(reader.error))
                return b""
            if not await reader.wait(timeout):
                raise httpcore.ReadTimeout("no answer within the timeout")
        buffer = reader.buffer
        if len(buffer) <= max_bytes:
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:max_bytes])
            del buffer[:max_bytes]
        if reader.reading_paused and len(buffer) <= _READ_HIGH // 2:
            reader.reading_paused = False
            self._transport.resume_reading()
        return data

    async def aclose(self) -> None:
        """Close (what was never read after is dropped with the connection)."""
        self._pending.clear()
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
    ) -> httpcore.AsyncNetworkStream:
        """Not carried here: only ``http://`` trackers use this backend."""
        raise httpcore.ConnectError("TLS is not carried by the plain-HTTP transport")

    def get_extra_info(self, info: str) -> Any:
        """The socket and its addresses, as httpcore's backend answers them; ``is_readable``:
        whether something arrived or the connection ended (an idle one the server closed)."""
        reader = self._reader
        if info == "is_readable":
            if reader.buffer or reader.ended or self._transport.is_closing():
                return True
            # What the loop has not handed over yet: the socket itself (a FIN just in).
            return self._poll is not None and bool(self._poll.poll(0))
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        return None


def client_transport(
    url: str, transport: httpx.AsyncBaseTransport | None, limits: httpx.Limits
) -> httpx.AsyncBaseTransport:
    """The httpx transport requests to ``url`` are sent on: TLS verified with
    :func:`tls_context` for ``https://`` (httpx's own transport, as ``AsyncClient`` builds it
    with ``trust_env=False``); no SSL context at all for ``http://``
    (:class:`PlainHttpTransport`). An injected transport is used as it is."""
    if transport is not None:
        return transport
    if url.lower().startswith("https:"):
        return httpx.AsyncHTTPTransport(verify=tls_context(), limits=limits, trust_env=False)
    return PlainHttpTransport(limits)


def http_client(
    url: str, transport: httpx.AsyncBaseTransport | None, limits: httpx.Limits, **kw: Any
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for ``url`` on :func:`client_transport`'s transport. Answers
    are read as a stream and a too-large one is refused as it arrives, by
    :class:`~tracker_client.nulltickets.transport.HttpTransport`."""
    return httpx.AsyncClient(
        base_url=url,
        limits=limits,
        transport=client_transport(url, transport, limits),
        follow_redirects=False,
        trust_env=False,
        **kw,
    )
