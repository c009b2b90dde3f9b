"""``backlog-worker check``'s look at ``[metrics]`` and ``[tracing]``: what ``run`` would refuse.

``run`` builds its telemetry at start and stops on a ``ConfigError`` (an address it can't bind,
tracing without the ``otel`` extra); ``check`` said everything was fine. This finds the same
problems without starting anything: it imports what ``run`` would import and binds the metrics
address for a moment. An address already in use is a warning, not a failure: it is most often
the running worker's own (``check`` is run beside the service), and ``run`` names it anyway.

It may touch the configuration and one short-lived listening socket; nothing is exported.
"""

from __future__ import annotations

import errno

from tracker_client.errors import ConfigError
from worker.cli.check_report import CheckReport
from worker.config.models import Config

__all__ = ["check_telemetry"]


def check_telemetry(config: Config, report: CheckReport) -> None:
    """Add a ``metrics`` and a ``tracing`` check to ``report`` for what is turned on."""
    if config.metrics.listen is not None:
        _check_metrics(config.metrics.listen, report)
    if config.tracing.enabled:
        _check_tracing(config, report)


def _check_metrics(listen: str, report: CheckReport) -> None:
    import socket

    from tracker_client.serve.metrics_http import bind
    from worker.config.telemetry import parse_listen

    host, port = parse_listen(listen)
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            detail = f"[metrics] listen {listen} is in use (by the running worker? `run` would "
            report.add("metrics", "warn", detail + "refuse it)")
            return
        try:  # the reason as run words it
            bind(host, port, what="[metrics] listen").close()
        except ConfigError as refused:
            report.add("metrics", "fail", str(refused))
            return
    report.add("metrics", "ok", f"[metrics] listen {listen} can be bound")


def _check_tracing(config: Config, report: CheckReport) -> None:
    tracing = config.tracing
    try:
        from worker.telemetry import tracing as module  # ConfigError without the otel extra

        if tracing.export == "otlp":
            module.otlp_exporter()
    except ConfigError as exc:
        report.add("tracing", "fail", str(exc))
        return
    where = tracing.endpoint if tracing.export == "otlp" else "the rail"
    report.add("tracing", "ok", f"[tracing] exports to {where} ({tracing.export})")
