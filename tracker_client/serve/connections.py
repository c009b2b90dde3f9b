"""Connection hygiene for ``tracker serve``: read timeouts, a connection cap, a quiet accept loop.

uvicorn closes a keep-alive connection idle *between* requests, but nothing else: a client that
connects and sends nothing, or sends its headers a byte at a time (slowloris), or its body that
way, holds a file descriptor for ever, and enough of them exhaust the process's descriptors.
Once ``accept()`` fails with ``EMFILE``, asyncio logs the failure once per pending connection
of every loop tick (47,000 traceback lines in 7 s were seen). Here:

* a request's headers must be complete within ``header_timeout_s`` of the connection opening
  (or of the previous answer, on a kept-alive connection), and its body within
  ``body_timeout_s`` of its headers; else the connection is closed. Time spent answering (a
  long-poll such as wait-for-work) is not limited;
* at most ``max_connections`` connections are open at once (by default what the descriptor
  limit leaves after a reserve); one more is closed as soon as it is accepted;
* at most ``max_client_connections`` of them from one client address (by default half the
  cap): one client holding idle connections cannot shut the others out;
* the event loop's error log (where accept failures go) keeps one line per kind of failure per
  :data:`LOG_INTERVAL_S`, with the count of the ones it held back.

:class:`ConnectionGuard` does it by composition, through public interfaces only: uvicorn's own
HTTP/1.1 protocol (``h11`` or ``httptools``, loaded by name as ``uvicorn.Config(http=...)``
loads it) runs unchanged inside a plain :class:`asyncio.Protocol` that sees the connection
open, its bytes arrive and the connection end, and the ASGI application is wrapped to see a
request's headers complete (the application is called), its body read whole and its answer
sent. The two meet through a context variable: asyncio gives each request's task a copy of
the context it was created in, and uvicorn creates it while the connection's bytes are handed
over. uvicorn's protocol classes used to be subclassed for this (reading their private request
state), with each answer's writes gathered into one; a same-run benchmark found neither worth
anything measurable in tasks/s (``python -m bench.transport``: 0.92-1.01x, docs/benchmarks.md).
An answer's head is held for its body again, now through the transport uvicorn is handed
(:class:`_OneSendAnswers`): not for throughput, but so an idle worker's parked claim is read in
one wake-up instead of two (the pickup latency).

It may touch the transport of a connection (to close it, and to hold an answer's head until
its body is written), the event loop's timers and
exception handler, the descriptor limit (:mod:`resource`) and a request's framing headers
(``Content-Length``, ``Transfer-Encoding``: whether a body is due); never a request's body, an
answer's content or the tracker.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import resource
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_HEADER_TIMEOUT_S",
    "HTTP_IMPLEMENTATIONS",
    "LOG_INTERVAL_S",
    "ConnectionGuard",
    "ConnectionLimits",
    "RateLimitedLog",
    "default_http",
    "default_max_connections",
    "install_loop_error_limiter",
]

log = logging.getLogger("backlog_worker.server")

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 60.0
#: Most connections served at once, whatever the descriptor limit allows.
MAX_CONNECTIONS_CEILING = 1000
#: Descriptors kept for everything but connections (the database, its WAL, threads, logs).
FD_RESERVE = 64
#: A repeated warning or loop error is logged at most once per this many seconds.
LOG_INTERVAL_S = 10.0


def default_max_connections() -> int:
    """What the soft ``RLIMIT_NOFILE`` leaves after :data:`FD_RESERVE`, at most 1000, at least 8."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS_CEILING
    return max(8, min(MAX_CONNECTIONS_CEILING, soft - FD_RESERVE))


class RateLimitedLog:
    """Logs a message at most once per ``interval_s`` per key; says how many it held back."""

    def __init__(self, logger: logging.Logger, interval_s: float = LOG_INTERVAL_S) -> None:
        self._log = logger
        self._interval = interval_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __call__(self, level: int, key: str, msg: str, *args: Any, **kwargs: Any) -> bool:
        """Log ``msg % args`` unless ``key`` was logged within the interval; True if logged."""
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            msg += " (%d more like it in the last %.0f s not logged)"
            args = (*args, held, self._interval)
        self._log.log(level, msg, *args, **kwargs)
        return True


@dataclass
class ConnectionLimits:
    """The limits of one server, shared by its connections."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_connections: int = field(default_factory=default_max_connections)
    #: Most connections open at once from one client address (None: half ``max_connections``).
    max_client_connections: int | None = None
    #: Connections closed for the cap, or for a timeout (for tests and the log).
    refused: int = 0
    timed_out: int = 0
    warn: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))
    #: Connections open now, in all and per client address.
    open: int = 0
    per_client: Counter[str] = field(default_factory=Counter)

    @property
    def client_cap(self) -> int:
        """The per-address cap in force."""
        return self.max_client_connections or max(1, self.max_connections // 2)


#: The HTTP/1.1 implementations ``tracker serve --http`` offers (uvicorn's two).
HTTP_IMPLEMENTATIONS = ("h11", "httptools")


def default_http() -> str:
    """``httptools`` where it is installed (its C parser costs the server less CPU per request
    than h11's pure-Python one, measured with ``bench.remote``), else ``h11``."""
    import importlib.util

    return "httptools" if importlib.util.find_spec("httptools") is not None else "h11"


#: The watch of the connection whose bytes are being handed to uvicorn: a request's task is
#: created then, in a copy of this context, and finds its connection's watch here.
_CONNECTION: contextvars.ContextVar[_Watch | None] = contextvars.ContextVar(
    "backlog_worker_connection", default=None
)


class _OneSendAnswers(asyncio.Transport):
    """A connection's transport as uvicorn's protocol sees it: an answer's head (status line
    and headers) is held until its body comes and both leave in one write.

    uvicorn writes the head when the application starts its answer and the body as a second
    write; each then leaves as a TCP segment of its own, and the client is woken for the head,
    parses it, and is woken again for the body. On the two cores the pickup bench shares with
    the client and the producer, the worker read a parked claim's head ~0.6 ms and its body
    ~1 ms after the server wrote them (docs/benchmarks/pickup.md). Everything else
    is the real transport's."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._holding = False
        self._held: list[bytes] = []

    def hold(self) -> None:
        """Keep what is written from now on until :meth:`release` (an answer's head)."""
        self._holding = True

    def release(self) -> None:
        """Write what was kept, in one write, and write through again."""
        self._holding = False
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            self._transport.write(data)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` (kept while holding)."""
        if self._holding:
            self._held.append(bytes(data))
        else:
            self._transport.write(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        """Write each piece (kept while holding)."""
        for data in list_of_data:
            self.write(data)

    def write_eof(self) -> None:
        """What is kept goes first."""
        self.release()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        """As the real transport."""
        return self._transport.can_write_eof()

    def close(self) -> None:
        """What is kept goes first (as it would have been written before the close)."""
        self.release()
        self._transport.close()

    def abort(self) -> None:
        """Drop what is kept with what the real transport still buffers."""
        self._holding = False
        self._held.clear()
        self._transport.abort()

    def is_closing(self) -> bool:
        """As the real transport."""
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """As the real transport."""
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """As the real transport."""
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        """As the real transport."""
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        """As the real transport."""
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        """As the real transport."""
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        """As the real transport."""
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """As the real transport."""
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        """The real transport's, and what is kept."""
        return self._transport.get_write_buffer_size() + sum(map(len, self._held))

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """As the real transport."""
        return self._transport.get_write_buffer_limits()


class _Watch:
    """The deadline of one connection: what it waits for (``headers`` or ``body``), if any;
    and its transport as uvicorn sees it (:class:`_OneSendAnswers`)."""

    __slots__ = (
        "_client",
        "_deadline",
        "_limits",
        "_loop",
        "_transport",
        "_waiting_for",
        "answers",
    )

    def __init__(self, limits: ConnectionLimits) -> None:
        self._limits = limits
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.BaseTransport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for = ""
        self._client: str | None = None
        #: The transport handed to uvicorn (None: the connection was refused).
        self.answers: _OneSendAnswers | None = None

    def made(self, transport: asyncio.BaseTransport) -> bool:
        """A new connection: closed at once over a cap (False), else its headers are awaited."""
        limits = self._limits
        peer = transport.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if limits.per_client[client] >= limits.client_cap:
            limits.refused += 1
            limits.warn(
                logging.WARNING,
                f"client_cap {client}",
                "%d connections open from %s, the most one client may hold"
                " (--max-client-connections): closing its new ones until some end",
                limits.per_client[client],
                client,
                extra={"action": "serve_client_connection_cap", "client": client},
            )
            _abort(transport)
            return False
        if limits.open >= limits.max_connections:
            limits.refused += 1
            limits.warn(
                logging.WARNING,
                "connection_cap",
                "%d connections open, the most this server keeps (--max-connections):"
                " closing new ones until some end",
                limits.open,
                extra={"action": "serve_connection_cap"},
            )
            _abort(transport)  # frees the descriptor now
            return False
        self._transport = transport
        self._client = client
        limits.per_client[client] += 1
        limits.open += 1
        self.arm("headers", limits.header_timeout_s)
        return True

    def lost(self) -> None:
        """The connection ended: no deadline, and its client holds one fewer."""
        self.disarm()
        client, self._client = self._client, None
        if client is not None:
            limits = self._limits
            limits.open -= 1
            limits.per_client[client] -= 1
            if limits.per_client[client] <= 0:
                del limits.per_client[client]

    def started(self, has_body: bool) -> None:
        """A request's headers are complete: its body is awaited, if it has one."""
        self.disarm()
        if has_body:
            self.arm("body", self._limits.body_timeout_s)

    def body_read(self) -> None:
        """The request's body is complete: answering is never limited."""
        if self._waiting_for == "body":
            self.disarm()

    def answered(self) -> None:
        """An answer went out: the next request's headers are awaited (a pipelined request
        already received is started at the next turn of the loop, which disarms it)."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            self.arm("headers", self._limits.header_timeout_s)

    def arm(self, what: str, seconds: float) -> None:
        """Close the connection unless ``what`` arrives within ``seconds``."""
        self.disarm()
        self._waiting_for = what
        self._deadline = self._loop.call_later(seconds, self._late)

    def disarm(self) -> None:
        """No deadline (the connection is answering, or gone)."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._waiting_for = ""

    def _late(self) -> None:
        limits = self._limits
        what = self._waiting_for
        self._deadline = None
        self._waiting_for = ""
        limits.timed_out += 1
        limits.warn(
            logging.INFO,
            f"late_{what}",
            "closed a connection whose request %s did not arrive within %.0f s",
            what,
            limits.header_timeout_s if what == "headers" else limits.body_timeout_s,
            extra={"action": "serve_connection_timeout"},
        )
        if self._transport is not None:
            self._transport.close()


def _abort(transport: asyncio.BaseTransport) -> None:
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:  # pragma: no cover - a server's connection is a full transport
        transport.close()


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
        if name == b"transfer-encoding":
            return True
    return False


class ConnectionGuard:
    """The limits of :class:`ConnectionLimits` on uvicorn's own ``http`` protocol
    (:data:`HTTP_IMPLEMENTATIONS`): pass :attr:`protocol` as ``uvicorn.Config(http=...)`` and
    the application wrapped by :meth:`wrap` as its app."""

    def __init__(self, limits: ConnectionLimits, http: str = "h11") -> None:
        if http not in HTTP_IMPLEMENTATIONS:
            raise ValueError(f"unknown HTTP implementation {http!r}: expected h11 or httptools")
        from uvicorn.config import HTTP_PROTOCOLS
        from uvicorn.importer import import_from_string

        #: uvicorn's protocol class for ``http``, as ``uvicorn.Config(http=name)`` loads it
        #: (ImportError where httptools is not installed).
        stock: Callable[..., asyncio.Protocol] = import_from_string(HTTP_PROTOCOLS[http])
        self.limits = limits
        self.protocol = _guarded_protocol(stock, limits)

    @staticmethod
    def wrap(app: ASGIApp) -> ASGIApp:
        """``app`` telling its connection's watch when a request starts, when its body has
        been read and when its answer went out (requests on an unguarded server pass as
        they are)."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            watch = _CONNECTION.get()
            if watch is None or scope["type"] != "http":
                await app(scope, receive, send)
                return
            has_body = _has_body(scope)
            watch.started(has_body)

            async def receive_body() -> Message:
                message = await receive()
                if not message.get("more_body", False):
                    watch.body_read()
                return message

            answers = watch.answers

            async def send_answer(message: Message) -> None:
                kind = message["type"]
                if answers is None:
                    await send(message)
                elif kind == "http.response.start":
                    answers.hold()  # the head leaves with the body: one write
                    try:
                        await send(message)
                    except BaseException:
                        answers.release()
                        raise
                else:
                    try:
                        await send(message)
                    finally:
                        answers.release()
                if kind == "http.response.body" and not message.get("more_body"):
                    watch.answered()

            # An app that fails or returns without a whole answer: uvicorn closes the connection.
            await app(scope, receive_body if has_body else receive, send_answer)

        return guarded


def _guarded_protocol(
    stock: Callable[..., asyncio.Protocol], limits: ConnectionLimits
) -> type[asyncio.Protocol]:
    class GuardedProtocol(asyncio.Protocol):
        """uvicorn's protocol, unchanged, inside the deadlines and caps of :class:`_Watch`:
        it forwards every call of :class:`asyncio.Protocol` (none for a connection refused
        at a cap), handing over the bytes with the connection's watch in the context."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._inner = stock(*args, **kwargs)
            self._watch = _Watch(limits)
            self._open = False

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            watch = self._watch
            if watch.made(transport):
                self._open = True
                # A stream server's transport: a full one (uvloop's is, without subclassing
                # asyncio's), so no isinstance check here.
                answers = watch.answers = _OneSendAnswers(cast(asyncio.Transport, transport))
                self._inner.connection_made(answers)

        def data_received(self, data: bytes) -> None:
            token = _CONNECTION.set(self._watch)
            try:
                self._inner.data_received(data)
            finally:
                _CONNECTION.reset(token)

        def eof_received(self) -> bool | None:
            return self._inner.eof_received()

        def connection_lost(self, exc: Exception | None) -> None:
            self._watch.lost()
            if self._open:
                self._open = False
                self._inner.connection_lost(exc)

        def pause_writing(self) -> None:
            self._inner.pause_writing()

        def resume_writing(self) -> None:
            self._inner.resume_writing()

    return GuardedProtocol


def install_loop_error_limiter(loop: asyncio.AbstractEventLoop) -> RateLimitedLog:
    """Route ``loop``'s error log through a :class:`RateLimitedLog`, one key per message.

    asyncio reports an ``accept()`` out of descriptors once per pending connection per tick,
    each with a traceback; one line per :data:`LOG_INTERVAL_S` says the same.
    """
    limited = RateLimitedLog(logging.getLogger("asyncio"))

    def handler(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "event loop error")
        exc = context.get("exception")
        detail = f": {exc!r}" if exc is not None else ""
        limited(logging.ERROR, message, "%s%s", message, detail)

    loop.set_exception_handler(handler)
    return limited
