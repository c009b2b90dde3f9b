"""Prometheus metrics of the served tracker (``tracker serve --metrics-listen``).

The served tracker's metrics (:class:`ServedMetrics`) live in their own registry and are read on
their own port, never on the API port:

* every request, by contract operation (the row's name, so the label is bounded: ``ui`` for the
  dashboard, ``unknown`` for no route) and status class: ``backlog_tracker_requests_total`` and
  ``backlog_tracker_request_duration_seconds`` (long polls count their whole wait);
* the queue per role, read from ``queue_stats`` at scrape time (cached :data:`QUEUE_CACHE_S`);
* lease expiries and crash loops, every one the server's rail swept (a claim's housekeeping or
  a maintenance pass), from the :class:`~tracker_client.sweeps.SweepCounts` the rail was
  opened with (docs/guarantees/edge-cases.md);
* claims answered "no work" while the role's rate limit or cap was exhausted (the claim itself
  is not touched: the limits are read after the answer went out, so this is an estimate);
* open and refused connections, when the server tells them.

They are answered by :func:`~tracker_client.serve.metrics_http.serve_metrics` on a socket bound
before the API serves; on a rail with an api token, only to ``Authorization: Bearer <token>``
(401 otherwise). Nothing secret is ever a label or a value.

It may touch the ASGI messages of the API (status, the claim's request body), the tracker
through the ``Tracker`` protocol (``queue_stats``, ``list_rate_limits``)
and the metrics socket; no worker code.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tracker_client.serve.metrics_http import (
    CONTENT_TYPE,
    bind,
    listening_on,
    queue_families,
    serve_metrics,
)

if TYPE_CHECKING:
    from starlette.types import Message, Receive, Scope, Send

    from tracker_client.models import QueueStats
    from tracker_client.protocol import Tracker
    from tracker_client.sweeps import SweepCounts

__all__ = [
    "CONTENT_TYPE",
    "QUEUE_CACHE_S",
    "REQUEST_BUCKETS",
    "ServedMetrics",
    "bind",
    "listening_on",
    "observe",
    "queue_families",
    "serve_metrics",
]

log = logging.getLogger("backlog_worker.metrics")

#: Seconds a scrape reuses the queue figures of the one before (scrapes from several servers).
QUEUE_CACHE_S = 2.0
#: Seconds the rate limits are reused for telling a refused claim from an empty queue.
LIMITS_CACHE_S = 1.0
#: Request durations, seconds: from a cached read to a whole long poll.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_MAX_CLAIM_BODY = 64 * 1024  # bytes of a claim body read for its role (larger: not looked at)


# -- the served tracker's metrics -----------------------------------------------------------------


@dataclass
class _Cached:
    stats: QueueStats | None = None
    at: float = -1e9
    limits: dict[str, Any] = field(default_factory=dict)
    limits_at: float = -1e9


class ServedMetrics:
    """The served tracker's registry and what fills it (see the module docstring)."""

    def __init__(
        self,
        tracker: Tracker,
        *,
        open_connections: Callable[[], int] | None = None,
        refused_connections: Callable[[], int] | None = None,
        sweeps: SweepCounts,
    ) -> None:
        """``tracker``: read at scrape time for the queue; ``open_connections`` and
        ``refused_connections``: the server's counts, when it has them; ``sweeps``: the
        counts the tracker keeps of every expired lease it reclaimed (given to it when opened),
        whichever operation swept them (a claim's housekeeping, a maintenance pass)."""
        self.tracker = tracker
        self.sweeps = sweeps
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "backlog_tracker_requests",
            "API requests answered, by contract operation and status class (2xx..5xx).",
            ["operation", "status_class"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "backlog_tracker_request_duration_seconds",
            "Time to answer an API request, by contract operation (long polls: the whole wait).",
            ["operation"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.maintenance = Counter(
            "backlog_tracker_maintenance_passes",
            "Maintenance passes this server answered.",
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "backlog_tracker_claims_rate_limited",
            "Claims answered no work while the role's rate limit or running cap was exhausted.",
            ["role"],
            registry=self.registry,
        )
        self.queue_errors = Counter(
            "backlog_tracker_queue_stats_errors",
            "Scrapes whose queue figures could not be read (the last ones are shown).",
            registry=self.registry,
        )
        self._cache = _Cached()
        self.registry.register(_Live(self, open_connections, refused_connections))

    async def observe(
        self,
        operation: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        call: Callable[[Receive, Send], Awaitable[None]],
    ) -> None:
        """The served app's observer (``app.observe(metrics.observe)``): :func:`observe`."""
        await observe(self, operation, scope, receive, send, call)

    async def render(self) -> bytes:
        """The exposition text, with fresh queue figures (cached :data:`QUEUE_CACHE_S`)."""
        now = time.monotonic()
        if now - self._cache.at >= QUEUE_CACHE_S:
            try:
                self._cache.stats = await self.tracker.queue_stats()
            except Exception as exc:  # a scrape shows the last figures
                self.queue_errors.inc()
                log.warning("metrics: queue figures unavailable: %s", exc)
            self._cache.at = now
        return generate_latest(self.registry)

    async def note_empty_claim(self, role: str) -> None:
        """A claim of ``role`` answered no work: count it when the role's limit is exhausted."""
        now = time.monotonic()
        cache = self._cache
        if now - cache.limits_at >= LIMITS_CACHE_S:
            cache.limits_at = now
            try:
                limits = await self.tracker.call("list_rate_limits")
            except Exception:  # no rate limits (plain rail), or unreadable
                limits = []
            cache.limits = {limit.role: limit for limit in limits}
        limit = cache.limits.get(role)
        if limit is None:
            return
        capped = limit.max_running is not None and limit.running >= limit.max_running
        if capped or (limit.tokens is not None and limit.tokens < 1.0):
            self.rate_limited.labels(role=role).inc()

    def note_maintenance(self) -> None:
        """A maintenance pass was answered (what it swept is in :attr:`sweeps`, as every
        claim's sweep is)."""
        self.maintenance.inc()


class _Live(Collector):
    """What is read at scrape time: the queue (from the cache) and the connections."""

    def __init__(
        self,
        metrics: ServedMetrics,
        open_connections: Callable[[], int] | None,
        refused_connections: Callable[[], int] | None,
    ) -> None:
        self._metrics = metrics
        self._open = open_connections
        self._refused = refused_connections

    def collect(self) -> Iterator[Any]:
        stats = self._metrics._cache.stats
        if stats is not None:
            yield from queue_families("backlog_tracker", stats)
        sweeps = self._metrics.sweeps
        yield CounterMetricFamily(
            "backlog_tracker_lease_expiries",
            "Expired leases this server's rail reclaimed: by any claim's housekeeping or a "
            "maintenance pass.",
            sweeps.expired_leases,
        )
        yield CounterMetricFamily(
            "backlog_tracker_crash_looped",
            "Tasks this server's rail dead-lettered as crash loops (max_stale_attempts expiries "
            "in a row), wherever the expiry was swept.",
            sweeps.crash_looped,
        )
        if self._open is not None:
            yield GaugeMetricFamily(
                "backlog_tracker_open_connections", "API connections open now.", self._open()
            )
        if self._refused is not None:
            yield CounterMetricFamily(
                "backlog_tracker_connections_refused",
                "API connections closed at once for being over --max-connections.",
                self._refused(),
            )


async def observe(
    metrics: ServedMetrics,
    operation: str,
    scope: Scope,
    receive: Receive,
    send: Send,
    call: Callable[[Receive, Send], Awaitable[None]],
) -> None:
    """Count and time one API request (refused ones too), noting a maintenance pass and the
    role of a claim answered no work: the served app's observer (``app.observe``), given the
    request's operation."""
    status = 500
    received = bytearray()
    started = time.perf_counter()

    async def tee_receive() -> Message:
        message = await receive()
        if message["type"] == "http.request" and len(received) <= _MAX_CLAIM_BODY:
            received.extend(message.get("body", b""))
        return message

    async def tee_send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        await send(message)

    try:
        await call(tee_receive if operation == "claim" else receive, tee_send)
    finally:
        metrics.duration.labels(operation=operation).observe(time.perf_counter() - started)
        metrics.requests.labels(operation=operation, status_class=f"{status // 100}xx").inc()
    if operation == "maintenance" and status == 200:
        metrics.note_maintenance()
    elif operation == "claim" and status == 204 and len(received) <= _MAX_CLAIM_BODY:
        role = _role_of(bytes(received))
        if role is not None:
            await metrics.note_empty_claim(role)


def _role_of(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    role = data.get("agent_role") if isinstance(data, dict) else None
    return role if isinstance(role, str) else None
