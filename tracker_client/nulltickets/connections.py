"""The connections of the NullTickets client: which ``httpx.AsyncClient`` a request is sent on.

:class:`~tracker_client.nulltickets.transport.HttpTransport` sends every request on a client
built here once (one for ``Connection: close`` requests, one for persistent connections once the
server advertises ``keep_alive``). What is decided here, and only at build time: TLS (a context
for ``https://``, built once per process; none at all for ``http://``, where an SSL context
would cost ~6-7 MiB of RSS for nothing: httpx's own transport without an SSL context carries
``http://``) and the pool's limits. It stands apart from the transport because none of it is
looked at per request.

``http://`` goes through httpx's own transport (httpcore's pool). A hand-written HTTP/1.1
transport did it for a while, in 1.35-1.4x less worker CPU per task, but was worth only
1.18-1.20x tasks/s to a worker draining a served rail (``python -m bench.transport``, see
docs/benchmarks.md): under the 1.3x that would pay for keeping an HTTP client of our own.
"""

from __future__ import annotations

import contextlib
import functools
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx
from httpcore import SOCKET_OPTION

__all__ = [
    "KEEP_ALIVE_CONNECTIONS",
    "KEEP_ALIVE_EXPIRY_S",
    "OneWriteRequests",
    "PlainHttpTransport",
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
    """httpcore's own network backend (anyio's), its connections sending what is written
    with the next read: a request's head and body leave in one write.

    httpcore writes a request's head and its body separately (with a pass of the event loop
    between), so each goes out as a TCP segment of its own: the server is woken for the head,
    starts the request and waits for its body. In the pickup bench the served tracker read a
    create's body 0.8 ms after its head, on two cores shared with the worker and the producer
    (docs/benchmarks/pickup.md). HTTP/1.1 without ``Expect: 100-continue`` (which
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
        """A connection of httpcore's backend, its writes gathered (see the class)."""
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _GatheredWrites(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """As :meth:`connect_tcp`, over a Unix socket."""
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _GatheredWrites(stream)

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
        request, on a worker's pickup path; docs/benchmarks/pickup.md)."""
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


def http_client(
    url: str, transport: httpx.AsyncBaseTransport | None, limits: httpx.Limits, **kw: Any
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for ``url``: TLS verified with :func:`tls_context` for
    ``https://``; no SSL context at all for ``http://`` (:class:`PlainHttpTransport`). An
    injected transport is used as it is. Answers are read as a stream and a too-large one is
    refused as it arrives, by :class:`~tracker_client.nulltickets.transport.HttpTransport`."""
    if transport is None and not url.lower().startswith("https:"):
        transport = PlainHttpTransport(limits)
    verify: ssl.SSLContext | bool = tls_context() if transport is None else True
    return httpx.AsyncClient(
        base_url=url,
        limits=limits,
        transport=transport,
        verify=verify,
        follow_redirects=False,
        trust_env=False,
        **kw,
    )
