"""OTLP/JSON documents for tests: ``document(span(...), ...)`` builds an
``ExportTraceServiceRequest`` as an exporter sends it (ids in hex, times as decimal strings,
attributes as ``KeyValue`` lists), with the ``nulltickets.task_id``/``run_id`` links."""

from __future__ import annotations

from typing import Any

TRACE = "0af7651916cd43dd8448eb211c80319c"
T0 = 1_790_000_000_000_000_000  # ns


def value(v: Any) -> dict[str, Any]:
    """An OTLP/JSON ``AnyValue``."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": attrs(v)}}
    return {"stringValue": v}


def attrs(values: dict[str, Any]) -> list[dict[str, Any]]:
    """OTLP/JSON ``KeyValue`` list."""
    return [{"key": k, "value": value(v)} for k, v in values.items()]


def span(
    n: int, name: str, *, start: int | None = None, duration_ns: int = 1_000_000, **attributes: Any
) -> dict[str, Any]:
    """One OTLP/JSON span; ``task``/``run`` keywords become the nulltickets attributes."""
    links = {
        f"nulltickets.{key}_id": attributes.pop(key) for key in ("task", "run") if key in attributes
    }
    begin = T0 + n * 1_000 if start is None else start
    return {
        "traceId": TRACE,
        "spanId": f"{n + 1:016x}",
        "parentSpanId": "" if n == 0 else f"{1:016x}",
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(begin),
        "endTimeUnixNano": str(begin + duration_ns),
        "attributes": attrs({**links, **attributes}),
        "status": {"code": 1 if n % 2 else 2, "message": "" if n % 2 else "broke"},
    }


def document(*spans: dict[str, Any], service: str = "backlog-worker") -> dict[str, Any]:
    """An OTLP/JSON ``ExportTraceServiceRequest`` with ``spans`` in one scope."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": attrs({"service.name": service})},
                "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}],
            }
        ]
    }
