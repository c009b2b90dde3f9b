"""OTLP ingest (``ingest_traces``, docs/reference/http-api.md) and the spans of a task (extension
``spans``), on every tracker of the suite through ``tracker.call``.

Spans are linked to their task and run by the ``nulltickets.task_id`` / ``nulltickets.run_id``
attributes (a span naming only its run is linked to the run's task), listed by start time, and
go with their task when it is purged. A document not of the OTLP shape is refused naming the
field, and nothing of it is stored.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.otlpdocs import T0, TRACE, document, span, value
from tests.contract.support import CLOCK, FakeClock, claim, make_pipeline, new_task
from tracker_client.errors import ValidationFailed
from tracker_client.observe_models import OtlpIngestResult, Span
from tracker_client.ops_models import PurgeResult
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.requires("spans")]


async def ingest(tracker: Tracker, doc: dict[str, Any]) -> OtlpIngestResult:
    result: OtlpIngestResult = await tracker.call("ingest_traces", document=doc)
    return result


async def spans_of(tracker: Tracker, task_id: str, **query: Any) -> list[Span]:
    found: list[Span] = await tracker.call("list_spans", task_id, **query)
    return found


async def test_spans_are_linked_to_their_task_and_run_and_listed_by_start_time(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    task_id, other = await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    lease = await claim(tracker)
    assert lease.task.id == task_id
    run_id = lease.run.id
    result = await ingest(
        tracker,
        document(
            span(0, "claim", start=T0 + 50, task=task_id, run=run_id, role="coder", attempt=1),
            span(1, "executor", start=T0 + 10, run=run_id),  # only the run: its task is found
            span(2, "unrelated", start=T0),
            span(3, "other task", start=T0 + 5, task=other),
            span(4, "before", start=T0 + 1, task=task_id),
        ),
    )
    assert (result.accepted_spans, result.stored) == (5, "json")
    shown = await spans_of(tracker, task_id)
    assert [s.name for s in shown] == ["before", "executor", "claim"]  # by start time
    first = next(s for s in shown if s.name == "claim")
    assert first.batch_id == result.batch_id
    assert (first.trace_id, first.span_id, first.parent_span_id) == (TRACE, f"{1:016x}", None)
    assert (first.task_id, first.run_id, first.service_name) == (task_id, run_id, "backlog-worker")
    assert (first.kind, first.status_code, first.status_message) == (1, 2, "broke")
    assert first.end_time_unix_nano == T0 + 50 + 1_000_000
    assert first.attributes["role"] == "coder" and first.attributes["attempt"] == 1
    executor = next(s for s in shown if s.name == "executor")
    assert (executor.task_id, executor.run_id, executor.parent_span_id) == (
        task_id,
        run_id,
        f"{1:016x}",
    )
    assert [s.name for s in await spans_of(tracker, task_id, run_id=run_id)] == [
        "executor",
        "claim",
    ]
    assert [s.name for s in await spans_of(tracker, other)] == ["other task"]
    assert [s.name for s in await spans_of(tracker, task_id, limit=2)] == ["before", "executor"]
    assert await spans_of(tracker, "no-such-task") == []


async def test_ingest_answers_as_nulltickets_and_batches_count_up(tracker: Tracker) -> None:
    empty = await ingest(tracker, {})
    assert (empty.accepted_spans, empty.stored) == (0, "json")
    none = await ingest(tracker, {"resourceSpans": []})
    assert none.batch_id > empty.batch_id
    # The upstream e2e document: a task and run of no rail are kept as named.
    e2e = document(span(0, "e2e.ingest", task="task-e2e", run="run-e2e"), service="e2e")
    again = await tracker.call("ingest_traces_collector", document=e2e)
    assert isinstance(again, OtlpIngestResult)
    assert (again.accepted_spans, again.stored) == (1, "json")
    assert again.batch_id > none.batch_id
    (kept,) = await spans_of(tracker, "task-e2e")
    assert (kept.run_id, kept.service_name) == ("run-e2e", "e2e")


async def test_attribute_values_are_unwrapped_to_plain_json(tracker: Tracker) -> None:
    nested: dict[str, Any] = {"list": [1, "two", 3.5, True], "map": {"k": ["v"]}}
    doc = document(
        span(0, "values", task="t-values", text="x", count=-7, f=0.25, ok=False, **nested)
    )
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] += [
        {"key": "bytes", "value": {"bytesValue": "AAE="}},
        {"key": "nan", "value": {"doubleValue": "NaN"}},
        {"key": "empty", "value": {}},
        {"key": "big", "value": {"intValue": "9223372036854775807"}},
    ]
    await ingest(tracker, doc)
    (stored,) = await spans_of(tracker, "t-values")
    assert stored.attributes == {
        "nulltickets.task_id": "t-values",
        "text": "x",
        "count": -7,
        "f": 0.25,
        "ok": False,
        "list": [1, "two", 3.5, True],
        "map": {"k": ["v"]},
        "bytes": "AAE=",
        "nan": "NaN",
        "empty": None,
        "big": 2**63 - 1,
    }


def _good() -> dict[str, Any]:
    """A resource of one good span (stored unless the document is refused)."""
    rs: dict[str, Any] = document(span(0, "good", task="t-bad"))["resourceSpans"][0]
    return rs


def _broken(path: str, bad: Any) -> dict[str, Any]:
    """A good span, then one whose field at ``path`` (dotted, in the span) is ``bad``."""
    doc = document(span(0, "good", task="t-bad"), span(1, "ok", task="t-bad"))
    target: Any = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    *parents, last = path.split(".")
    for key in parents:
        target = target[key]
    if bad is KeyError:
        del target[last]
    else:
        target[last] = bad
    return doc


_SPAN = "resourceSpans[0].scopeSpans[0].spans[1]"
_DEEP = value([[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]])
BAD_DOCUMENTS: list[tuple[str, Any, str]] = [
    ("resourceSpans-object", {"resourceSpans": {}}, "resourceSpans: expected an array"),
    ("resource-list", {"resourceSpans": [_good(), []]}, "resourceSpans[1]: expected an object"),
    (
        "scopeSpans-string",
        {"resourceSpans": [_good(), {"scopeSpans": "x"}]},
        "resourceSpans[1].scopeSpans: expected an array",
    ),
    (
        "spans-number",
        {"resourceSpans": [_good(), {"scopeSpans": [{"spans": 3}]}]},
        "resourceSpans[1].scopeSpans[0].spans: expected an array",
    ),
    ("no-traceId", _broken("traceId", KeyError), f"{_SPAN}.traceId: required"),
    ("no-spanId", _broken("spanId", KeyError), f"{_SPAN}.spanId: required"),
    ("no-name", _broken("name", KeyError), f"{_SPAN}.name: required"),
    ("empty-name", _broken("name", ""), f"{_SPAN}.name: required"),
    ("short-traceId", _broken("traceId", "abc"), f"{_SPAN}.traceId: expected 32 hex digits"),
    ("non-hex-spanId", _broken("spanId", "z" * 16), f"{_SPAN}.spanId: expected 16 hex digits"),
    ("zero-traceId", _broken("traceId", "0" * 32), f"{_SPAN}.traceId: an all-zero id"),
    (
        "long-parent",
        _broken("parentSpanId", "1" * 32),
        f"{_SPAN}.parentSpanId: expected 16 hex digits",
    ),
    ("numeric-spanId", _broken("spanId", 12), f"{_SPAN}.spanId: expected 16 hex digits"),
    ("bad-start", _broken("startTimeUnixNano", "soon"), f"{_SPAN}.startTimeUnixNano"),
    ("negative-end", _broken("endTimeUnixNano", -1), f"{_SPAN}.endTimeUnixNano"),
    ("huge-start", _broken("startTimeUnixNano", str(2**64)), f"{_SPAN}.startTimeUnixNano"),
    ("bad-kind", _broken("kind", 9), f"{_SPAN}.kind: expected one of"),
    ("bad-status", _broken("status.code", "bad"), f"{_SPAN}.status.code"),
    ("attributes-object", _broken("attributes", {}), f"{_SPAN}.attributes: expected an array"),
    (
        "attribute-no-key",
        _broken("attributes", [{"value": {"stringValue": "x"}}]),
        f"{_SPAN}.attributes[0].key: expected a string",
    ),
    (
        "int-not-int",
        _broken("attributes", [{"key": "k", "value": {"intValue": "1.5"}}]),
        f"{_SPAN}.attributes[0].value.intValue",
    ),
    (
        "deep-value",
        _broken("attributes", [{"key": "k", "value": _DEEP}]),
        "nested deeper than 16",
    ),
]


@pytest.mark.parametrize(("doc", "named"), [pytest.param(d, n, id=i) for i, d, n in BAD_DOCUMENTS])
async def test_a_document_not_of_the_otlp_shape_is_refused_naming_the_field(
    tracker: Tracker, doc: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        await ingest(tracker, doc)
    assert caught.value.code == "invalid_otlp"
    assert named in str(caught.value)
    assert await spans_of(tracker, "t-bad") == []  # not even the good span before it


async def test_bad_list_arguments_are_refused(tracker: Tracker) -> None:
    for limit in (0, 1001):
        with pytest.raises(ValidationFailed, match="limit"):
            await spans_of(tracker, "t", limit=limit)


@pytest.mark.requires(CLOCK)
async def test_spans_go_with_their_purged_task_and_unlinked_ones_after_the_retention(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    done_id, kept_id = await tracker.create_tasks([new_task(pid, "done"), new_task(pid, "kept")])
    lease = await claim(tracker)
    await ingest(
        tracker,
        document(
            span(0, "done", task=done_id, run=lease.run.id),
            span(1, "kept", task=kept_id),
            span(2, "of no task"),
            span(3, "of a task of no rail", task="elsewhere"),
        ),
    )
    await tracker.transition(lease, "complete")
    clock.advance(2 * 86_400_000)
    fresh = await ingest(tracker, document(span(4, "fresh", task="elsewhere")))
    result: PurgeResult = await tracker.call("purge", older_than_ms=86_400_000)
    assert result.tasks == 1
    assert await spans_of(tracker, done_id) == []
    assert [s.name for s in await spans_of(tracker, kept_id)] == ["kept"]  # its task is waiting
    assert [(s.name, s.batch_id) for s in await spans_of(tracker, "elsewhere")] == [
        ("fresh", fresh.batch_id)
    ]
