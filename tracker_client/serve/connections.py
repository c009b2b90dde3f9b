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
* the event loop's error log (where accept failures go) keeps one line per kind of failure per
  :data:`LOG_INTERVAL_S`, with the count of the ones it held back.

It may touch uvicorn's HTTP protocol (a subclass of its h11 connection), the event loop's exception
handler and the descriptor limit (:mod:`resource`); never a request's content or the tracker.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_HEADER_TIMEOUT_S",
    "LOG_INTERVAL_S",
    "ConnectionLimits",
    "RateLimitedLog",
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
    #: Connections closed for the cap, or for a timeout (for tests and the log).
    refused: int = 0
    timed_out: int = 0
    warn: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))


def protocol_class(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``limits`` (pass it as ``uvicorn.Config(http=...)``)."""

    class GuardedH11Protocol(H11Protocol):
        """Closes a connection whose headers or body are late, and any over the cap."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deadline: asyncio.TimerHandle | None = None
            self._waiting_for = ""
            self._seen_cycle: object = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                limits.refused += 1
                limits.warn(
                    logging.WARNING,
                    "connection_cap",
                    "%d connections open, the most this server keeps (--max-connections):"
                    " closing new ones until some end",
                    len(self.connections) - 1,
                    extra={"action": "serve_connection_cap"},
                )
                transport.abort()  # frees the descriptor now
                return
            self._arm("headers", limits.header_timeout_s)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def _follow(self) -> bool:
            """Re-arm for the request in progress; True if a new one started."""
            cycle = self.cycle
            if cycle is None:
                return False
            if cycle is not self._seen_cycle:  # a new request's headers are complete
                self._seen_cycle = cycle
                self._disarm()
                if cycle.more_body:
                    self._arm("body", limits.body_timeout_s)
                return True
            if self._waiting_for == "body" and not cycle.more_body:
                self._disarm()
            return False

        def on_response_complete(self) -> None:
            super().on_response_complete()  # may start a pipelined request already buffered
            if not self.transport.is_closing() and not self._follow():
                self._arm("headers", limits.header_timeout_s)  # the next request's headers

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self, what: str, seconds: float) -> None:
            self._disarm()
            self._waiting_for = what
            self._deadline = self.loop.call_later(seconds, self._late)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._waiting_for = ""

        def _late(self) -> None:
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
            self.transport.close()

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
