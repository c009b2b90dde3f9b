"""Finished OpenTelemetry spans as one OTLP/JSON ``ExportTraceServiceRequest`` document.

The worker's ``[tracing] export = "rail"`` sends its spans to its own rail with
``tracker_client.calls.INGEST_TRACES`` (``document=...``); that operation takes OTLP/JSON, which
differs from protobuf's generic JSON mapping in the ways this module follows: trace and span ids
are hex (not base64), enums are integers, 64-bit integers are decimal strings, attribute values
are ``AnyValue`` objects (``{"stringValue": ...}``).

Pure: it reads the spans the SDK hands over (``ReadableSpan``) and builds plain dicts; no I/O.
Imported only when tracing is on (it needs the ``otel`` extra).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["any_value", "document", "span_json"]


def any_value(value: object) -> dict[str, Any]:
    """One attribute value as an OTLP ``AnyValue`` (sequences as ``arrayValue``)."""
    if type(value) is str:  # by far the most common: checked first
        return {"stringValue": value}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": str(value)}
    if isinstance(value, bytes):
        return {"stringValue": value.decode("utf-8", "replace")}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


#: Encoded ``{"key", "value"}`` pairs of one document, by ``(key, value)``.
_Cache = dict[tuple[str, object], dict[str, Any]]


def _attributes(attributes: Mapping[str, object] | None, cache: _Cache) -> list[dict[str, Any]]:
    # The spans of a batch repeat the same few pairs (task and run ids, role): encoded once.
    out = []
    for key, value in (attributes or {}).items():
        try:
            encoded = cache.get((key, value))
        except TypeError:  # an unhashable value: encoded each time
            out.append({"key": key, "value": any_value(value)})
            continue
        if encoded is None:
            encoded = cache[(key, value)] = {"key": key, "value": any_value(value)}
        out.append(encoded)
    return out


def span_json(span: ReadableSpan, cache: _Cache | None = None) -> dict[str, Any]:
    """One span (OTLP ``Span``): ids in hex, times as decimal strings, kind and status codes
    as OTLP's integers (the SDK's ``SpanKind`` counts from INTERNAL = 0, OTLP's from 1).
    ``cache``: attribute pairs already encoded for the same document."""
    cache = {} if cache is None else cache
    ctx = span.get_span_context()
    assert ctx is not None  # a span the SDK finished always has one
    out: dict[str, Any] = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
        "name": span.name,
        "kind": span.kind.value + 1,
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": _attributes(span.attributes, cache),
        "status": {"code": span.status.status_code.value},
    }
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    if ctx.trace_state:
        out["traceState"] = ctx.trace_state.to_header()
    if span.status.description:
        out["status"]["message"] = span.status.description
    if span.events:
        out["events"] = [
            {
                "timeUnixNano": str(e.timestamp),
                "name": e.name,
                "attributes": _attributes(e.attributes, cache),
            }
            for e in span.events
        ]
    return out


def document(spans: Iterable[ReadableSpan]) -> dict[str, Any]:
    """The spans as one ``ExportTraceServiceRequest``, grouped by resource and by scope."""
    cache: _Cache = {}
    resources: dict[int, tuple[dict[str, Any], dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    for span in spans:
        key = id(span.resource)
        if key not in resources:
            resources[key] = ({"attributes": _attributes(span.resource.attributes, cache)}, {})
        scope = span.instrumentation_scope
        name = (scope.name, scope.version or "") if scope is not None else ("", "")
        resources[key][1].setdefault(name, []).append(span_json(span, cache))
    return {
        "resourceSpans": [
            {
                "resource": resource,
                "scopeSpans": [
                    {"scope": {"name": name, "version": version}, "spans": items}
                    for (name, version), items in scopes.items()
                ],
            }
            for resource, scopes in resources.values()
        ]
    }
