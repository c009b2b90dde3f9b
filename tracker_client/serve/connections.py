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

Both of uvicorn's HTTP/1.1 protocols are guarded alike (:func:`protocol_class`): h11's
pure-Python one and httptools' (a C parser; the default where it is installed).

It may touch uvicorn's HTTP protocols (a subclass of its h11 or httptools connection), the
event loop's exception handler and the descriptor limit (:mod:`resource`); never a request's
content or the tracker.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from tracker_client.serve.coalesce import CoalescingTransport

__all__ = [
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_HEADER_TIMEOUT_S",
    "HTTP_IMPLEMENTATIONS",
    "LOG_INTERVAL_S",
    "ConnectionLimits",
    "RateLimitedLog",
    "default_http",
    "default_max_connections",
    "install_loop_error_limiter",
    "protocol_class",
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
    #: Connections open now, per client address.
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


class _Watch:
    """The deadlines of one connection, whichever protocol class parses it.

    Both uvicorn protocols keep the request in progress as ``cycle`` (a new object per request,
    made once its headers are complete; ``more_body`` until its body is complete), and call
    ``on_response_complete`` once an answer is sent.
    """

    def __init__(self, conn: Any, limits: ConnectionLimits) -> None:
        self._conn = conn
        self._limits = limits
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for = ""
        self._seen_cycle: Any = None
        self._client: str | None = None

    def made(self, transport: asyncio.Transport) -> bool:
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
            transport.abort()
            return False
        if len(self._conn.connections) > limits.max_connections:
            limits.refused += 1
            limits.warn(
                logging.WARNING,
                "connection_cap",
                "%d connections open, the most this server keeps (--max-connections):"
                " closing new ones until some end",
                len(self._conn.connections) - 1,
                extra={"action": "serve_connection_cap"},
            )
            transport.abort()  # frees the descriptor now
            return False
        self._client = client
        limits.per_client[client] += 1
        self.arm("headers", limits.header_timeout_s)
        return True

    def lost(self) -> None:
        """The connection ended: no deadline, and its client holds one fewer."""
        self.disarm()
        client, self._client = self._client, None
        if client is not None:
            counts = self._limits.per_client
            counts[client] -= 1
            if counts[client] <= 0:
                del counts[client]

    def follow(self) -> bool:
        """Re-arm for the request in progress; True if a new one started."""
        cycle = self._conn.cycle
        if cycle is None:
            return False
        if cycle is not self._seen_cycle:  # a new request's headers are complete
            self._seen_cycle = cycle
            self.disarm()
            if cycle.more_body:
                self.arm("body", self._limits.body_timeout_s)
            return True
        if self._waiting_for == "body" and not cycle.more_body:
            self.disarm()
        return False

    def answered(self) -> None:
        """An answer went out: await the next request's headers, unless one is in progress
        already (pipelined: h11 starts it now, httptools parsed it earlier). Answering is never
        limited."""
        conn = self._conn
        if conn.transport.is_closing() or self.follow():
            return
        cycle = conn.cycle
        if cycle is not None and not cycle.response_complete:
            return
        self.arm("headers", self._limits.header_timeout_s)

    def arm(self, what: str, seconds: float) -> None:
        """Close the connection unless ``what`` arrives within ``seconds``."""
        self.disarm()
        self._waiting_for = what
        self._deadline = self._conn.loop.call_later(seconds, self._late)

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
        self._conn.transport.close()


def protocol_class(limits: ConnectionLimits, http: str = "h11") -> type[asyncio.Protocol]:
    """uvicorn's ``http`` protocol (:data:`HTTP_IMPLEMENTATIONS`) with ``limits`` (pass it as
    ``uvicorn.Config(http=...)``): closes a connection whose headers or body are late, and any
    over the cap; each answer is sent in one write (:mod:`~tracker_client.serve.coalesce`).
    The two subclasses differ only in their base."""
    if http not in HTTP_IMPLEMENTATIONS:
        raise ValueError(f"unknown HTTP implementation {http!r}: expected h11 or httptools")
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        class GuardedHttpToolsProtocol(HttpToolsProtocol):
            """httptools' connection with the deadlines of :class:`_Watch`."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._watch = _Watch(self, limits)

            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                if self._watch.made(transport):
                    self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]

            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                self._watch.follow()

            def on_response_complete(self) -> None:
                self.transport.flush()  # type: ignore[attr-defined]
                super().on_response_complete()  # may start a pipelined request parsed earlier
                self._watch.answered()

            def connection_lost(self, exc: Exception | None) -> None:
                self._watch.lost()
                super().connection_lost(exc)

        return GuardedHttpToolsProtocol

    class GuardedH11Protocol(H11Protocol):
        """h11's connection with the deadlines of :class:`_Watch`."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._watch = _Watch(self, limits)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if self._watch.made(transport):
                self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch.follow()

        def on_response_complete(self) -> None:
            self.transport.flush()  # type: ignore[attr-defined]
            super().on_response_complete()  # may start a pipelined request already buffered
            self._watch.answered()

        def connection_lost(self, exc: Exception | None) -> None:
            self._watch.lost()
            super().connection_lost(exc)

    return GuardedH11Protocol


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
