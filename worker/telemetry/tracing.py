"""OpenTelemetry traces of the worker (``[tracing] enabled``). Placeholder: being built."""

from __future__ import annotations

from worker.config.telemetry import TracingConfig
from worker.telemetry import Telemetry

__all__ = ["WorkerTracing"]


class WorkerTracing(Telemetry):
    """The worker's spans (not built yet: this placeholder records nothing)."""

    def __init__(self, config: TracingConfig) -> None:
        """Export spans as ``config`` says."""
        self.config = config
