"""The metrics reference: every Prometheus metric of the worker (``[metrics] listen``) and of the
served tracker (``tracker serve --metrics-listen``), read from the registries themselves.

Each side's metrics object is built for real (the worker's binds an ephemeral port on
127.0.0.1, closed at once), its scrape-time families made to appear (a view of the worker's
slots, the queue gauges of :func:`~tracker_client.serve.metrics_http.queue_families`), and its
registry collected: a metric added to either side appears on the page without anyone writing it
down."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .markdown import code, table, text


@dataclass(frozen=True)
class Metric:
    """One metric family as scraped."""

    #: ``worker`` or ``tracker``.
    side: str
    #: The family's name (a counter's samples add ``_total``; a histogram's ``_bucket``,
    #: ``_sum``, ``_count``).
    name: str
    type: str
    help: str
    labels: tuple[str, ...]

    @property
    def exposed(self) -> str:
        """The name a scrape shows: a counter's ``_total``."""
        return self.name + "_total" if self.type == "counter" else self.name


def _labels(family: Any, declared: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    from_samples: dict[str, None] = {}
    for sample in family.samples:
        from_samples.update(dict.fromkeys(k for k in sample.labels if k not in ("le",)))
    return tuple(from_samples) or declared.get(family.name, ())


def _declared(owner: object) -> dict[str, tuple[str, ...]]:
    """The label names of the metric objects ``owner`` holds (a labelled metric with no child
    yet has no sample to read them from)."""
    from prometheus_client.metrics import MetricWrapperBase

    return {
        m._name: tuple(m._labelnames)
        for m in vars(owner).values()
        if isinstance(m, MetricWrapperBase)
    }


def _families(side: str, registry: Any, owner: object, extra: Iterator[Any]) -> list[Metric]:
    declared = _declared(owner)
    found: dict[str, Metric] = {}
    for family in [*registry.collect(), *extra]:
        found.setdefault(
            family.name,
            Metric(side, family.name, family.type, family.documentation, _labels(family, declared)),
        )
    return list(found.values())


def _empty_queue() -> Any:
    from tracker_client.models import QueueStats

    return QueueStats(roles=[], generated_at_ms=0)


def worker_metrics() -> list[Metric]:
    """Every metric family a worker's ``/metrics`` shows (process metrics included)."""
    from tracker_client.serve.metrics_http import queue_families
    from worker.config.telemetry import MetricsConfig
    from worker.telemetry import WorkerView
    from worker.telemetry.metrics import WorkerMetrics

    metrics = WorkerMetrics(MetricsConfig(listen="127.0.0.1:0"))
    try:
        view = WorkerView(
            tracker=None,  # type: ignore[arg-type]  # read by the queue refresh only
            slots=lambda: (0, 1),
            roles=lambda: ("role",),
            agent_id="docs",
        )
        metrics.attach(view)
        queue = queue_families("backlog_worker", _empty_queue(), ["role"])
        return _families("worker", metrics.registry, metrics, queue)
    finally:
        metrics.socket.close()


def tracker_metrics() -> list[Metric]:
    """Every metric family ``tracker serve --metrics-listen`` shows."""
    from tracker_client.serve.metrics import ServedMetrics
    from tracker_client.serve.metrics_http import queue_families
    from tracker_client.sweeps import SweepCounts

    metrics = ServedMetrics(
        None,  # type: ignore[arg-type]  # read at scrape time only
        open_connections=lambda: 0,
        refused_connections=lambda: 0,
        sweeps=SweepCounts(),
    )
    queue = queue_families("backlog_tracker", _empty_queue(), ["role"])
    return _families("tracker", metrics.registry, metrics, queue)


def _table(metrics: list[Metric]) -> str:
    return table(
        ["metric", "type", "labels", "meaning"],
        [
            [
                code(m.exposed),
                m.type,
                ", ".join(code(label) for label in m.labels),
                text(m.help),
            ]
            for m in metrics
        ],
    )


def page() -> str:
    """The whole metrics reference page."""
    worker = worker_metrics()
    tracker = tracker_metrics()
    own = [m for m in worker if not m.name.startswith("process_")]
    process = [m for m in worker if m.name.startswith("process_")]
    return "\n".join(
        [
            "# Metrics\n",
            "Every Prometheus metric, generated from the metrics registries themselves when "
            "the docs are built. Both sides answer `GET /metrics` in the text exposition "
            "format on a port of their own (never the API's). Labels are bounded: a configured "
            "role, a contract operation, an outcome, action, reason or error kind of a small "
            "fixed set (anything else reads `other`); never a task or run id, never a token. A "
            "histogram shows as `<name>_bucket`, `<name>_sum` and `<name>_count`.\n",
            "## The worker\n",
            "Served on `[metrics] listen` (see [Configuration](configuration.md)); the queue "
            "figures of the worker's roles are read every `[metrics] queue_interval_s`.\n",
            _table(own),
            "The process's own metrics (CPU, memory, file descriptors), where the platform "
            "gives them:\n",
            _table(process),
            "## The served tracker\n",
            "Served by `backlog-worker tracker serve --metrics-listen HOST:PORT`; on a rail "
            "with an api token, only to `Authorization: Bearer <token>`. The queue figures are "
            "read at scrape time (cached for 2 s).\n",
            _table(tracker),
        ]
    )
