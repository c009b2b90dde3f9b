"""Prometheus metrics of the worker (``[metrics] listen``): what it claimed, ran and asked of the
tracker, its slots and its roles' queues, on ``GET http://<listen>/metrics``.

Every metric is in the worker's own registry (never the process-global one), prefixed
``backlog_worker_``, in base units; labels are bounded: a configured role, an outcome or action
or error kind of a small fixed set (anything else reads ``other``), never a task or run id or a
token. The hooks only add to counters and histograms; the slots are read at scrape time, and the
queue figures of the worker's roles by :meth:`WorkerMetrics.serve` every ``queue_interval_s``
(one ``queue_stats`` call; a failed read is counted, never raised, and the last figures kept).

The listen address is bound when the metrics are built (before the worker claims anything):
an address that can't be bound is a ``ConfigError`` naming ``[metrics] listen``.

It may touch its registry, its listening socket (through
:func:`tracker_client.serve.metrics_http.serve_metrics`) and the tracker's ``queue_stats``; no task
data beyond a run's role and how it ended.
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from tracker_client.errors import (
    BacklogFull,
    Conflict,
    InvalidTransition,
    LeaseLost,
    NotFound,
    TokenRefused,
    TrackerCorrupt,
    TrackerRejected,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)
from tracker_client.serve.browser import HostRule, named_hosts
from tracker_client.serve.metrics_http import bind, listening_on, queue_families, serve_metrics
from tracker_client.sweeps import SweepCounts
from tracker_client.version import package_version
from worker.config.telemetry import MetricsConfig, parse_listen
from worker.telemetry import RunEnd, RunTelemetry, Telemetry, WorkerView

if TYPE_CHECKING:
    from tracker_client.models import Lease, QueueStats

__all__ = [
    "ACTIONS",
    "ERROR_KINDS",
    "LOSS_REASONS",
    "OUTCOMES",
    "RUN_BUCKETS",
    "TRACKER_BUCKETS",
    "WorkerMetrics",
    "error_kind",
]

log = logging.getLogger("backlog_worker.worker")

#: The tracker calls the worker makes (``action`` label).
ACTIONS = frozenset(
    {"claim", "heartbeat", "add_event", "add_artifact", "transition", "fail", "release"}
)
#: How a run ends (``outcome`` label: :class:`~worker.run.settings.RunResult` ``status``).
OUTCOMES = frozenset({"transitioned", "failed", "released", "lost", "conflict", "report_failed"})
#: Why a lease was lost (``reason`` label): the tracker's codes and the worker's own clock.
LOSS_REASONS = frozenset(
    {"expired", "expired_locally", "revoked", "not_found", "invalid_token", "lease_lost"}
)
#: Error kinds (``kind`` label), most specific first.
_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (TrackerUnavailable, "unavailable"),
    (LeaseLost, "lease_lost"),
    (InvalidTransition, "invalid_transition"),
    (Conflict, "conflict"),
    (NotFound, "not_found"),
    (BacklogFull, "backlog_full"),
    (Unsupported, "unsupported"),
    (TokenRefused, "token_refused"),
    (ValidationFailed, "validation_failed"),
    (TrackerRejected, "rejected"),
    (TrackerCorrupt, "corrupt"),
    (TimeoutError, "timeout"),
)
ERROR_KINDS = frozenset(kind for _, kind in _KINDS) | {"other"}
#: Run durations, seconds: a no-op executor to an hour-long agent run.
RUN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
#: Tracker request durations, seconds: an in-process SQLite write to a slow remote.
TRACKER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def error_kind(error: BaseException) -> str:
    """The ``kind`` label of ``error`` (one of :data:`ERROR_KINDS`)."""
    return next((kind for cls, kind in _KINDS if isinstance(error, cls)), "other")


def _bounded(value: str, allowed: frozenset[str]) -> str:
    return value if value in allowed else "other"


class _Children:
    """A metric's children by label values, looked up once: ``labels()`` takes a lock and
    checks every value on each call, which the hot paths (several per task) need not pay."""

    __slots__ = ("_cache", "_metric")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._cache: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._cache.get(values)
        if child is None:
            child = self._cache[values] = self._metric.labels(*values)
        return child


class WorkerMetrics(Telemetry):
    """The worker's Prometheus metrics (see the module docstring)."""

    enabled = True

    def __init__(self, config: MetricsConfig, sweeps: SweepCounts | None = None) -> None:
        """Bind ``config.listen`` now (``ConfigError`` when it can't be) and make the metrics.
        ``sweeps``: the counts the worker's rail keeps of the expired leases it reclaimed
        (a rail opened directly; a served rail's server counts its own)."""
        if config.listen is None:
            raise ValueError("WorkerMetrics needs [metrics] listen")
        self.config = config
        self.sweeps = sweeps if sweeps is not None else SweepCounts()
        self.socket = bind(*parse_listen(config.listen), what="[metrics] listen")
        #: ``HOST:PORT`` really listened on (the port chosen for port 0).
        self.address = listening_on(self.socket)
        self._view: WorkerView | None = None
        self._queue: QueueStats | None = None
        self.registry = reg = CollectorRegistry(auto_describe=True)
        self.claims = Counter(
            "backlog_worker_claims",
            "Claims answered, by role and result: task, empty (no work) or error (failed for "
            "good after retries).",
            ["role", "result"],
            registry=reg,
        )
        self.runs = Counter(
            "backlog_worker_runs_finished",
            "Runs finished, by role and outcome (transitioned, failed, released, lost, "
            "conflict, report_failed).",
            ["role", "outcome"],
            registry=reg,
        )
        self.dead_lettered = Counter(
            "backlog_worker_runs_dead_lettered",
            "Failed runs whose task was dead-lettered (no retry follows), by role.",
            ["role"],
            registry=reg,
        )
        self.run_duration = Histogram(
            "backlog_worker_run_duration_seconds",
            "A run's time from its lease to its final report, by role.",
            ["role"],
            buckets=RUN_BUCKETS,
            registry=reg,
        )
        self.phase_duration = Histogram(
            "backlog_worker_run_phase_duration_seconds",
            "A run's phases (executor, report), by role and phase.",
            ["role", "phase"],
            buckets=RUN_BUCKETS,
            registry=reg,
        )
        self.tracker_duration = Histogram(
            "backlog_worker_tracker_request_duration_seconds",
            "One attempt of a tracker call, by action (claim, heartbeat, add_event, "
            "add_artifact, transition, fail, release), failed attempts included.",
            ["action"],
            buckets=TRACKER_BUCKETS,
            registry=reg,
        )
        self.tracker_errors = Counter(
            "backlog_worker_tracker_errors",
            "Tracker call attempts that failed, by action and error kind.",
            ["action", "kind"],
            registry=reg,
        )
        self.lease_losses = Counter(
            "backlog_worker_lease_losses",
            "Runs that lost their lease, by role and reason (expired, expired_locally, "
            "revoked, not_found, invalid_token, lease_lost).",
            ["role", "reason"],
            registry=reg,
        )
        self.queue_errors = Counter(
            "backlog_worker_queue_stats_errors",
            "Reads of the queue figures that failed, by error kind (the last figures stay).",
            ["kind"],
            registry=reg,
        )
        self.queue_updated = Gauge(
            "backlog_worker_queue_stats_updated_timestamp_seconds",
            "When the queue figures were last read (Unix time; 0: not yet).",
            registry=reg,
        )
        info = Gauge(
            "backlog_worker_build_info",
            "Always 1: the worker's version and Python.",
            ["version", "python"],
            registry=reg,
        )
        info.labels(version=package_version(), python=platform.python_version()).set(1)
        reg.register(_Live(self))
        ProcessCollector(registry=reg)  # process_cpu_seconds_total, resident memory, fds
        self._claims = _Children(self.claims)  # (role, result)
        self._runs = _Children(self.runs)  # (role, outcome)
        self._run_duration = _Children(self.run_duration)  # (role,)
        self._phase_duration = _Children(self.phase_duration)  # (role, phase)
        self._tracker_duration = _Children(self.tracker_duration)  # (action,)
        self._tracker_errors = _Children(self.tracker_errors)  # (action, kind)

    # -- the hooks ------------------------------------------------------------------------------
    def claim_answered(self, role: str, *, found: bool, started_ns: int, ended_ns: int) -> None:
        """Count the claim (``task`` or ``empty``)."""
        self._claims(role, "task" if found else "empty").inc()

    def claim_failed(self, role: str, error: BaseException) -> None:
        """Count the claim that failed for good."""
        self._claims(role, "error").inc()

    def tracker_call(
        self, action: str, *, started_ns: int, ended_ns: int, error: BaseException | None
    ) -> None:
        """Time the attempt and count its error; a cancelled attempt (the worker stopping, a
        lease ending) is neither an error nor a latency."""
        if error is not None and not isinstance(error, Exception):
            return
        label = action if action in ACTIONS else "other"
        self._tracker_duration(label).observe((ended_ns - started_ns) / 1e9)
        if error is not None:
            self._tracker_errors(label, error_kind(error)).inc()

    def run(
        self, lease: Lease, role: str, *, claim_started_ns: int, claim_ended_ns: int
    ) -> RunTelemetry:
        """The run's phases and ending, for ``role``."""
        return _RunMetrics(self, role)

    def attach(self, view: WorkerView) -> None:
        """Read the slots and roles from ``view`` from now on."""
        self._view = view

    async def serve(self) -> None:
        """Answer ``/metrics`` and refresh the queue figures until cancelled."""
        log.info("metrics on http://%s/metrics", self.address, extra={"action": "metrics_on"})
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._listen)
            await self._refresh_queue()

    async def _listen(self) -> None:
        try:
            # The Host names answered: the bound address's and BACKLOG_WORKER_ALLOWED_HOSTS
            # (a scraper using another DNS name must be listed; docs/operate/security.md).
            bound = str(self.socket.getsockname()[0])
            hosts = HostRule.for_bind(bound, named_hosts(()))
            await serve_metrics(self.socket, self.render, hosts=hosts)
        except Exception:  # the worker goes on without /metrics rather than stop
            log.exception(
                "the metrics listener failed: /metrics is not served until the worker restarts",
                extra={"action": "metrics_failed"},
            )

    async def aclose(self) -> None:
        """Close the listening socket (when :meth:`serve` never ran)."""
        self.socket.close()

    async def render(self) -> bytes:
        """The exposition text now."""
        return generate_latest(self.registry)

    async def _refresh_queue(self) -> None:
        while True:
            view = self._view
            if view is not None:
                try:
                    self._queue = await view.tracker.queue_stats()
                except Exception as exc:  # counted, never raised: the worker goes on
                    self.queue_errors.labels(kind=error_kind(exc)).inc()
                else:
                    self.queue_updated.set(time.time())
            await anyio.sleep(self.config.queue_interval_s)


class _RunMetrics(RunTelemetry):
    """One run's phases and ending."""

    __slots__ = ("_metrics", "_role")

    def __init__(self, metrics: WorkerMetrics, role: str) -> None:
        self._metrics = metrics
        self._role = role

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._metrics._phase_duration(self._role, name).observe(time.perf_counter() - started)

    def finished(self, result: RunEnd, *, duration_ns: int) -> None:
        m, role = self._metrics, self._role
        m._runs(role, _bounded(result.status, OUTCOMES)).inc()
        m._run_duration(role).observe(duration_ns / 1e9)
        if result.dead_lettered:
            m.dead_lettered.labels(role=role).inc()
        if result.status == "lost":
            reason = _bounded(result.detail, LOSS_REASONS)
            m.lease_losses.labels(role=role, reason=reason).inc()


class _Live(Collector):
    """What is read at scrape time: the slots, and the last queue figures of the roles."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        view = self._metrics._view
        if view is None:
            return
        busy, total = view.slots()
        yield GaugeMetricFamily("backlog_worker_slots_busy", "Slots running a task now.", busy)
        # A gauge: no ``_total`` suffix (Prometheus keeps that for counters).
        yield GaugeMetricFamily("backlog_worker_slots", "Slots (concurrency).", total)
        sweeps = self._metrics.sweeps
        yield CounterMetricFamily(
            "backlog_worker_lease_expiries",
            "Expired leases the worker's rail reclaimed (its claims' housekeeping and its "
            "maintenance passes; a rail it opens directly).",
            sweeps.expired_leases,
        )
        yield CounterMetricFamily(
            "backlog_worker_crash_looped",
            "Tasks the worker's rail dead-lettered as crash loops, wherever the expiry was swept.",
            sweeps.crash_looped,
        )
        queue = self._metrics._queue
        if queue is not None:
            roles: Sequence[str] = view.roles()
            yield from queue_families("backlog_worker", queue, roles)
        abandoned = GaugeMetricFamily(
            "backlog_worker_abandoned_threads",
            "Threads of cancelled runs still running (a plain def python function that ignores "
            "cancellation); the role is not claimed for at its max_abandoned_threads.",
            labels=["role"],
        )
        for role, count in sorted(view.abandoned_threads().items()):
            abandoned.add_metric([role], count)
        yield abandoned
