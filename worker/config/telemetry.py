"""The ``[metrics]`` and ``[tracing]`` tables: what the worker exposes and exports about itself.

Both are off by default (no listener, no exporter, nothing imported). Values only; the
telemetry itself is :mod:`worker.telemetry`'s.
"""

from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["MetricsConfig", "TracingConfig", "parse_listen"]


def parse_listen(value: str) -> tuple[str, int]:
    """``"127.0.0.1:9464"`` (or ``"[::1]:9464"``) as ``(host, port)``; ValueError naming what is
    wrong otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"must be HOST:PORT (e.g. 127.0.0.1:9464), got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"port must be a number from 0 to 65535, got {port!r}")
    return host, int(port)


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricsConfig(_Table):
    """``[metrics]``: a Prometheus ``/metrics`` endpoint of the worker (opt-in)."""

    #: Where ``/metrics`` is served (``"127.0.0.1:9464"``); None (the default): nowhere.
    listen: str | None = None
    #: Seconds between two reads of the queue figures of the worker's roles (one
    #: ``queue_stats`` call each time; a failed read is counted and the last figures kept).
    queue_interval_s: float = Field(15.0, ge=0.05, le=3600.0)

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is not None:
            parse_listen(value)
        return value


class TracingConfig(_Table):
    """``[tracing]``: OpenTelemetry spans of claims and runs (opt-in; the ``otel`` extra)."""

    #: Trace claims and runs (needs the ``otel`` extra).
    enabled: bool = False
    #: ``rail``: spans go into the worker's own rail (shown by ``task show``); ``otlp``: to an
    #: OTLP/HTTP collector at ``endpoint``.
    export: Literal["rail", "otlp"] = "rail"
    #: The collector's traces URL for ``export = "otlp"`` (e.g. http://127.0.0.1:4318/v1/traces).
    endpoint: str | None = None
    #: The ``service.name`` of the spans.
    service_name: str = "backlog-worker"
    #: Fraction of runs traced (parent-based ratio sampling).
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
        return value

    @field_validator("service_name")
    @classmethod
    def _service_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _otlp_needs_endpoint(self) -> Self:
        if self.enabled and self.export == "otlp" and self.endpoint is None:
            raise ValueError(
                'export = "otlp" needs endpoint (the collector\'s traces URL, '
                'e.g. "http://127.0.0.1:4318/v1/traces")'
            )
        return self
