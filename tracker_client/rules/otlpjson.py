"""OTLP/JSON trace documents read into span rows, with every field they store checked.

An OTLP/JSON ``ExportTraceServiceRequest`` (what ``POST /v1/traces`` carries with a JSON content
type, docs/reference/http-api.md) is ``{"resourceSpans": [{"resource": {"attributes": [...]},
"scopeSpans": [{"scope": {...}, "spans": [span, ...]}]}]}``. Of each span the rail keeps its
ids, name, kind, times, status, the resource's ``service.name`` and its attributes (OTLP
``AnyValue`` unwrapped to plain JSON), and links it to a task and run by the attributes
``nulltickets.task_id`` / ``nulltickets.run_id``. Fields it does not store (events, links,
trace state, scope) are not read.

A document that is not of that shape is refused whole with ``ValidationFailed`` (code
``invalid_otlp``) naming the path of the first wrong field (``resourceSpans[0].scopeSpans[0].
spans[3].traceId: ...``), so nothing of it is stored. The OTLP/JSON rules that apply: ids are
lowercase or uppercase hex of 32 (trace) and 16 (span) digits, not all zero; 64-bit integers
(times, ``intValue``) may be JSON numbers or decimal strings; enums are integers (their names
are read too).

Pure: no I/O, no tracker; it may use the errors only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tracker_client.errors import ValidationFailed

__all__ = [
    "MAX_SPANS",
    "RUN_ATTRIBUTE",
    "TASK_ATTRIBUTE",
    "ParsedSpan",
    "parse_traces",
]

#: The span attributes that link a span to its task and run (docs/guarantees/nulltickets.md).
TASK_ATTRIBUTE = "nulltickets.task_id"
RUN_ATTRIBUTE = "nulltickets.run_id"
#: Most spans one document may carry (a 4 MiB body holds about 20,000 small ones).
MAX_SPANS = 100_000
#: Deepest nesting of ``arrayValue`` / ``kvlistValue`` inside one attribute value.
MAX_VALUE_DEPTH = 16

_MAX_INT64 = 2**63 - 1
_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")
_SPAN_ID = re.compile(r"[0-9a-fA-F]{16}")
_INT = re.compile(r"-?\d{1,19}")
_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


@dataclass(frozen=True, slots=True)
class ParsedSpan:
    """One span as the rail stores it (ids lowercase hex, times Unix nanoseconds)."""

    trace_id: str
    span_id: str
    name: str
    parent_span_id: str | None = None
    kind: int | None = None
    start_time_unix_nano: int | None = None
    end_time_unix_nano: int | None = None
    status_code: int | None = None
    status_message: str | None = None
    service_name: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    #: ``attributes`` as the JSON text stored.
    attributes_json: str = "{}"


#: Where a field is: a path, or (where, suffix) / (where, key, index), spelled out only for an
#: error (formatting a path for every value would cost more than reading the value).
Where = str | tuple[Any, ...]


def _path(where: Where) -> str:
    parts: list[str] = []
    while isinstance(where, tuple):
        parts.append(f"{where[1]}[{where[2]}]" if len(where) == 3 else str(where[1]))
        where = where[0]
    parts.append(where)
    return "".join(reversed(parts))


def _bad(where: Where, message: str) -> ValidationFailed:
    return ValidationFailed(f"OTLP document: {_path(where)}: {message}", code="invalid_otlp")


def _list(parent: Mapping[str, Any], key: str, where: Where) -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad((where, key), f"expected an array, got {type(value).__name__}")
    return value


def _object(value: Any, where: Where) -> Mapping[str, Any]:
    if type(value) is dict:
        return value
    if not isinstance(value, Mapping):
        raise _bad(where, f"expected an object, got {type(value).__name__}")
    return value


def _hex_id(span: Mapping[str, Any], key: str, where: str) -> str:
    value = span.get(key)
    digits = 32 if key == "traceId" else 16
    if value is None:
        raise _bad(f"{where}.{key}", "required")
    if (
        not isinstance(value, str)
        or (_TRACE_ID if digits == 32 else _SPAN_ID).fullmatch(value) is None
    ):
        raise _bad(f"{where}.{key}", f"expected {digits} hex digits, got {value!r:.80}")
    if value.strip("0") == "":
        raise _bad(f"{where}.{key}", "an all-zero id is invalid")
    return value.lower()


def _int64(value: Any, where: str) -> int | None:
    """A uint64 of OTLP/JSON (a number or a decimal string) within SQLite's signed range."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.isdigit():
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise _bad(where, f"expected an integer or a decimal string, got {value!r:.80}")
    if not 0 <= number <= _MAX_INT64:
        raise _bad(where, f"out of range 0..{_MAX_INT64}: {number}")
    return number


def _enum(value: Any, names: Mapping[str, int], where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value in names:
        return names[value]
    if isinstance(value, int) and not isinstance(value, bool) and value in names.values():
        return value
    raise _bad(where, f"expected one of {sorted(names.values())}, got {value!r:.80}")


def _any_value(value: Any, where: Where, depth: int = 0) -> Any:
    """An OTLP ``AnyValue`` as plain JSON (``{}``, no known field, is null)."""
    if depth > MAX_VALUE_DEPTH:
        raise _bad(where, f"nested deeper than {MAX_VALUE_DEPTH} arrayValue/kvlistValue levels")
    value = _object(value, where)
    if "stringValue" in value:
        text = value["stringValue"]
        if type(text) is not str:
            raise _bad((where, ".stringValue"), f"expected a string, got {text!r:.80}")
        return text
    if "intValue" in value:
        raw = value["intValue"]
        if type(raw) is str and _INT.fullmatch(raw):
            raw = int(raw)
        if type(raw) is not int or not -(2**63) <= raw <= _MAX_INT64:
            raise _bad((where, ".intValue"), f"expected a 64-bit integer, got {raw!r:.80}")
        return raw
    if "boolValue" in value:
        flag = value["boolValue"]
        if not isinstance(flag, bool):
            raise _bad((where, ".boolValue"), f"expected true or false, got {flag!r:.80}")
        return flag
    if "doubleValue" in value:
        return _double(value["doubleValue"], (where, ".doubleValue"))
    if "bytesValue" in value:
        data = value["bytesValue"]
        if not isinstance(data, str):
            raise _bad((where, ".bytesValue"), f"expected a base64 string, got {data!r:.80}")
        return data
    if "arrayValue" in value:
        array = _object(value["arrayValue"], (where, ".arrayValue"))
        items = _list(array, "values", (where, ".arrayValue."))
        at = (where, ".arrayValue.values")
        return [_any_value(v, (*at, n), depth + 1) for n, v in enumerate(items)]
    if "kvlistValue" in value:
        pairs = _object(value["kvlistValue"], (where, ".kvlistValue"))
        return _attributes(pairs, "values", (where, ".kvlistValue."), depth + 1)
    return None


def _double(raw: Any, where: Where) -> Any:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise _bad(where, f"expected a number, got {raw!r:.80}")
    if isinstance(raw, str):
        try:
            number = float(raw)
        except ValueError:
            raise _bad(where, f"expected a number, got {raw!r:.80}") from None
        return number if math.isfinite(number) else raw  # "NaN"/"Infinity" kept as text
    return raw


def _attributes(
    parent: Mapping[str, Any], key: str, where: Where, depth: int = 0
) -> dict[str, Any]:
    """A ``KeyValue`` list as ``{key: value}`` (a repeated key: the last one wins)."""
    found: dict[str, Any] = {}
    for n, pair in enumerate(_list(parent, key, where)):
        pair = _object(pair, (where, key, n))
        name = pair.get("key")
        if type(name) is not str:
            raise _bad(((where, key, n), ".key"), f"expected a string, got {name!r:.80}")
        raw = pair.get("value")
        found[name] = None if raw is None else _any_value(raw, ((where, key, n), ".value"), depth)
    return found


def _link(attributes: Mapping[str, Any], key: str) -> str | None:
    value = attributes.get(key)
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        return None
    return str(value)


def _span(span: Any, where: str, service: str | None) -> ParsedSpan:
    span = _object(span, where)
    name = span.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(f"{where}.name", "required (a non-empty string)")
    status = _object(span.get("status") or {}, f"{where}.status")
    message = status.get("message")
    if message is not None and not isinstance(message, str):
        raise _bad(f"{where}.status.message", f"expected a string, got {message!r:.80}")
    attributes = _attributes(span, "attributes", f"{where}.")
    try:  # one C-speed pass: what is stored must be finite numbers and valid UTF-8
        text = json.dumps(attributes, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        (text + name + (message or "")).encode("utf-8")
    except ValueError as exc:  # NaN/Infinity as Python floats, lone surrogates
        raise _bad(where, f"not storable as JSON text: {exc}") from None
    parent = span.get("parentSpanId")
    return ParsedSpan(
        trace_id=_hex_id(span, "traceId", where),
        span_id=_hex_id(span, "spanId", where),
        name=name,
        parent_span_id=None if parent in (None, "") else _hex_id(span, "parentSpanId", where),
        kind=_enum(span.get("kind"), _KINDS, f"{where}.kind"),
        start_time_unix_nano=_int64(span.get("startTimeUnixNano"), f"{where}.startTimeUnixNano"),
        end_time_unix_nano=_int64(span.get("endTimeUnixNano"), f"{where}.endTimeUnixNano"),
        status_code=_enum(status.get("code"), _STATUS, f"{where}.status.code"),
        status_message=message or None,
        service_name=service,
        task_id=_link(attributes, TASK_ATTRIBUTE),
        run_id=_link(attributes, RUN_ATTRIBUTE),
        attributes=attributes,
        attributes_json=text,
    )


def parse_traces(document: Any) -> list[ParsedSpan]:
    """Every span of the OTLP/JSON ``document``, in document order; ``ValidationFailed`` (code
    ``invalid_otlp``) naming the first thing wrong. Only what is stored is read and checked
    (values nest at most :data:`MAX_VALUE_DEPTH` levels; strings are valid UTF-8). ``{}`` and
    ``{"resourceSpans": []}`` are valid: no spans."""
    if not isinstance(document, Mapping):
        raise _bad("(document)", f"expected an object, got {type(document).__name__}")
    spans: list[ParsedSpan] = []
    for r, resource_spans in enumerate(_list(document, "resourceSpans", "")):
        at = f"resourceSpans[{r}]"
        resource_spans = _object(resource_spans, at)
        resource = _object(resource_spans.get("resource") or {}, f"{at}.resource")
        service = _attributes(resource, "attributes", f"{at}.resource.").get("service.name")
        service_name = service if isinstance(service, str) and service else None
        if service_name is not None and not service_name.isascii():
            try:
                service_name.encode("utf-8")
            except UnicodeEncodeError:
                raise _bad(f"{at}.resource", "service.name is not valid UTF-8") from None
        for s, scope_spans in enumerate(_list(resource_spans, "scopeSpans", f"{at}.")):
            scope_at = f"{at}.scopeSpans[{s}]"
            scope_spans = _object(scope_spans, scope_at)
            for n, span in enumerate(_list(scope_spans, "spans", f"{scope_at}.")):
                if len(spans) >= MAX_SPANS:
                    raise _bad("resourceSpans", f"more than {MAX_SPANS} spans in one document")
                spans.append(_span(span, f"{scope_at}.spans[{n}]", service_name))
    return spans
