"""Building the worker's telemetry from its configuration: nothing is imported for what is off.

It may touch the configuration only; the implementations are imported when enabled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker.config.telemetry import MetricsConfig, TracingConfig
from worker.telemetry import NOOP, FanOut, Telemetry

if TYPE_CHECKING:
    from tracker_client.sweeps import SweepCounts

__all__ = ["build"]


def build(
    metrics: MetricsConfig, tracing: TracingConfig, sweeps: SweepCounts | None = None
) -> Telemetry:
    """The telemetry ``[metrics]`` and ``[tracing]`` ask for: :data:`~worker.telemetry.NOOP` when
    both are off, one of them, or both as one. ``sweeps``: the counts the worker's rail keeps
    of the expired leases it reclaimed (exposed by the metrics)."""
    parts: list[Telemetry] = []
    if metrics.listen is not None:
        from worker.telemetry.metrics import WorkerMetrics

        parts.append(WorkerMetrics(metrics, sweeps))
    if tracing.enabled:
        from worker.telemetry.tracing import WorkerTracing

        parts.append(WorkerTracing(tracing))
    if not parts:
        return NOOP
    return parts[0] if len(parts) == 1 else FanOut(parts)
