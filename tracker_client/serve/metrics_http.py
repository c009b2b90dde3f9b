"""The small ``/metrics`` listener of the worker and the served tracker, and the queue gauges
both show.

:func:`serve_metrics` answers ``GET /metrics`` (and ``HEAD``) on a socket bound beforehand by
:func:`bind`, so an address in use is an error at start rather than later; it runs on asyncio
or trio (the worker's backend), one short connection per scrape (``Connection: close``), at
most :data:`MAX_SCRAPERS` at once, each given :data:`READ_TIMEOUT_S` to send its request. With a
token it answers only ``Authorization: Bearer <token>`` (compared in constant time; 401
otherwise, the token never echoed).

It may touch its socket and the render callback it is given; nothing of the tracker.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.abc
from prometheus_client import disable_created_metrics
from prometheus_client.core import GaugeMetricFamily

from tracker_client.errors import ConfigError
from tracker_client.serve.browser import HostRule
from tracker_client.serve.throttle import AuthThrottle

if TYPE_CHECKING:
    from tracker_client.models import QueueStats

__all__ = [
    "CONTENT_TYPE",
    "MAX_SCRAPERS",
    "READ_TIMEOUT_S",
    "bind",
    "listening_on",
    "queue_families",
    "serve_metrics",
]

log = logging.getLogger("backlog_worker.metrics")

# No ``*_created`` series beside each counter and histogram: they double what is scraped and
# no alert here reads them (process-wide, and only the metrics' own processes import this).
disable_created_metrics()  # type: ignore[no-untyped-call]


#: The text exposition format every Prometheus reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Seconds a scraper has to send its request line and headers.
READ_TIMEOUT_S = 10.0
#: Connections to the metrics port served at once; more are closed at once.
MAX_SCRAPERS = 16
_MAX_REQUEST_HEAD = 16 * 1024  # bytes of a /metrics request line and headers


def bind(host: str, port: int, *, what: str) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free one); ``ConfigError`` naming
    ``what`` (the setting) and the reason when it can't be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        return socket.create_server(address[:2], family=family, backlog=64)
    except OSError as exc:
        # create_server's own message repeats the address; the errno's text says it plainly
        if exc.errno and not isinstance(exc, socket.gaierror):
            reason = os.strerror(exc.errno)
        else:
            reason = exc.strerror or str(exc)
        raise ConfigError(f"{what}: cannot listen on {host}:{port}: {reason}") from None


def listening_on(sock: socket.socket) -> str:
    """``HOST:PORT`` the socket really listens on (the port chosen for port 0)."""
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve_metrics(
    sock: socket.socket,
    render: Callable[[], Awaitable[bytes]],
    *,
    token: str | None = None,
    hosts: HostRule | None = None,
) -> None:
    """Answer ``GET /metrics`` with ``render()`` on ``sock`` until cancelled (the socket is then
    closed). ``token``: the bearer token a scrape must send (401 without it). ``hosts``: the
    ``Host`` names answered (421 otherwise: a DNS-rebinding page reads nothing); default: those
    of the address the socket is bound to (:class:`~tracker_client.serve.browser.HostRule`)."""
    expected = token.encode() if token else None
    rule = hosts or HostRule.for_bind(sock.getsockname()[0])
    throttle = AuthThrottle(what="metrics token")
    limit = anyio.Semaphore(MAX_SCRAPERS)
    listener = await anyio.abc.SocketListener.from_socket(sock)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        # A scraper that goes away mid-answer is its own loss: never the listener's (nor the
        # worker's, whose task group this runs in).
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async with stream:
                if limit.value == 0:
                    return  # too many scrapers at once: close this one
                async with limit:
                    with anyio.move_on_after(READ_TIMEOUT_S):
                        head = await _read_head(stream)
                        if head is not None:
                            peer = stream.extra(anyio.abc.SocketAttribute.remote_address, "?")  # noqa: S610 - anyio, not Django
                            client = str(peer[0]) if isinstance(peer, tuple) else str(peer)
                            guard = _Guard(expected, rule, throttle, client)
                            await stream.send(await _answer(head, render, guard))

    async with listener:
        await listener.serve(handle)


async def _read_head(stream: anyio.abc.SocketStream) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > _MAX_REQUEST_HEAD:
            return None
        try:
            data += await stream.receive(4096)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return None
    return data.split(b"\r\n\r\n", 1)[0]


@dataclass(frozen=True)
class _Guard:
    """What a scrape must pass: the token, the Host names, the failed-token throttle, and the
    scraper's address (the TCP peer)."""

    token: bytes | None
    hosts: HostRule
    throttle: AuthThrottle
    client: str


async def _answer(head: bytes, render: Callable[[], Awaitable[bytes]], guard: _Guard) -> bytes:
    lines = head.split(b"\r\n")
    parts = lines[0].split()
    if len(parts) != 3:
        return _response(400, b"bad request\n")
    method, target = parts[0], parts[1].split(b"?", 1)[0]
    if target != b"/metrics":
        return _response(404, b"not found: the metrics are at /metrics\n")
    if method not in (b"GET", b"HEAD"):
        return _response(405, b"method not allowed\n", extra=b"Allow: GET, HEAD\r\n")
    if not guard.hosts.allows(_header(lines[1:], b"host")):
        return _response(421, b"misdirected request: this Host is not a name of this server\n")
    if guard.token is not None and guard.throttle.wait_s(guard.client):
        return _response(429, b"too many wrong tokens from this address; retry later\n")
    if guard.token is not None and not _authorized(lines[1:], guard.token):
        if _header(lines[1:], b"authorization") is not None:
            guard.throttle.failed(guard.client)
        return _response(
            401,
            b"unauthorized: send Authorization: Bearer <api token>\n",
            extra=b'WWW-Authenticate: Bearer realm="metrics"\r\n',
        )
    try:
        body = await render()
    except Exception:
        log.exception("rendering the metrics failed", extra={"action": "metrics_failed"})
        return _response(500, b"rendering the metrics failed\n")
    return _response(200, body, content_type=CONTENT_TYPE.encode(), head=method == b"HEAD")


def _header(headers: list[bytes], wanted: bytes) -> str | None:
    for line in headers:
        name, _, value = line.partition(b":")
        if name.strip().lower() == wanted:
            return value.strip().decode("latin-1")
    return None


def _authorized(headers: list[bytes], token: bytes) -> bool:
    for line in headers:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            scheme, _, given = value.strip().partition(b" ")
            return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), token)
    return False


_REASONS = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found"}
_REASONS |= {405: b"Method Not Allowed", 421: b"Misdirected Request"}
_REASONS |= {429: b"Too Many Requests", 500: b"Internal Server Error"}


def _response(
    status: int,
    body: bytes,
    *,
    content_type: bytes = b"text/plain; charset=utf-8",
    extra: bytes = b"",
    head: bool = False,
) -> bytes:
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n"
        % (status, _REASONS[status], content_type, len(body))
        + extra
        + b"\r\n"
        + (b"" if head else body)
    )


# -- the queue figures, shared with the worker's metrics ------------------------------------------


def queue_families(
    prefix: str, stats: QueueStats, roles: Iterable[str] | None = None
) -> Iterator[GaugeMetricFamily]:
    """The queue gauges of ``stats`` (``<prefix>_queue_waiting``, ``_running``, ``_scheduled``,
    ``_dead_lettered``, ``_oldest_waiting_age_seconds``) for ``roles`` (default: every role in
    it; a role no pipeline declares reads 0). A figure the rail doesn't give (a plain NullTickets
    server has no running count) is left out rather than guessed."""
    names = list(roles) if roles is not None else [r.role for r in stats.roles]
    families = {
        "waiting": "Tasks waiting to be claimed (due or not), by role.",
        "running": "Tasks leased now, by role.",
        "scheduled": "Waiting delayed tasks whose run_at is still ahead, by role.",
        "dead_lettered": "Dead-lettered tasks (failed for good), by role.",
        "oldest_waiting_age_seconds": "Age of the oldest claimable task, by role (0: none).",
    }
    out = {
        k: GaugeMetricFamily(f"{prefix}_queue_{k}", doc, labels=["role"])
        for k, doc in families.items()
    }
    for role in names:
        row = stats.for_role(role)
        if row is None:
            for family in out.values():
                family.add_metric([role], 0.0)
            continue
        waiting = row.waiting_count if row.waiting_count is not None else row.claimable_count
        out["waiting"].add_metric([role], float(waiting))
        if row.running_count is not None:
            out["running"].add_metric([role], float(row.running_count))
        if row.scheduled_count is not None:
            out["scheduled"].add_metric([role], float(row.scheduled_count))
        dead = row.dead_letter_count
        out["dead_lettered"].add_metric(
            [role], float(dead if dead is not None else row.failed_count)
        )
        age_ms = row.oldest_claimable_age_ms or 0
        out["oldest_waiting_age_seconds"].add_metric([role], age_ms / 1000)
    yield from out.values()
