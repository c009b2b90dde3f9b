"""Prometheus metrics of the worker (``[metrics] listen``). Placeholder: being built."""

from __future__ import annotations

from worker.config.telemetry import MetricsConfig
from worker.telemetry import Telemetry

__all__ = ["WorkerMetrics"]


class WorkerMetrics(Telemetry):
    """The worker's Prometheus metrics (not built yet: this placeholder records nothing)."""

    def __init__(self, config: MetricsConfig) -> None:
        """Serve ``/metrics`` on ``config.listen``."""
        self.config = config
