"""What only an in-process caller can hand the embedded tracker's OTLP ingest: Python values no
JSON body carries (NaN floats, lone surrogates, non-string keys, not a mapping) and bad blob
arguments. Each is refused naming what is wrong, and nothing is written (the span tables are
read back)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.contract.otlpdocs import document, span
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import ValidationFailed

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[EmbeddedTracker]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        yield tracker
    finally:
        await tracker.aclose()


def _rows(tracker: EmbeddedTracker) -> tuple[int, int]:
    conn = sqlite3.connect(tracker.path)
    try:
        batches = conn.execute("SELECT count(*) FROM span_batches").fetchone()[0]
        spans = conn.execute("SELECT count(*) FROM spans").fetchone()[0]
    finally:
        conn.close()
    return int(batches), int(spans)


def _with_attribute(value: dict[str, Any]) -> dict[str, Any]:
    doc = document(span(0, "s", task="t"))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] = [
        {"key": "k", "value": value}
    ]
    return doc


def _named(name: str) -> dict[str, Any]:
    return document(span(0, name, task="t"))


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        (["not", "a", "mapping"], "(document): expected an object, got list"),
        (_with_attribute({"doubleValue": float("nan")}), "not storable as JSON text"),
        (_with_attribute({"doubleValue": float("inf")}), "not storable as JSON text"),
        (_with_attribute({"stringValue": "\ud800"}), "not storable as JSON text"),
        (_named("bad \udfff name"), "not storable as JSON text"),
        (_with_attribute({"intValue": 2**64}), "expected a 64-bit integer"),
        (_with_attribute({"intValue": True}), "expected a 64-bit integer"),
        (_with_attribute({"boolValue": 1}), "expected true or false"),
        (_with_attribute({"doubleValue": [1]}), "expected a number"),
        (_with_attribute({"bytesValue": b"x"}), "expected a base64 string"),
    ],
)
async def test_values_no_json_body_carries_are_refused(
    tracker: EmbeddedTracker, doc: Any, named: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        await tracker.ingest_traces(doc)
    assert caught.value.code == "invalid_otlp"
    assert named in str(caught.value)
    assert _rows(tracker) == (0, 0)


@pytest.mark.parametrize(
    ("data", "content_type", "named"),
    [
        ("text", "application/x-protobuf", "data: expected bytes"),
        (b"x", "", "content_type: must be a non-empty string"),
        (b"x", "a" * 256, "at most 255 printable characters"),
        (b"x", "bad\ntype", "at most 255 printable characters"),
    ],
)
async def test_bad_blob_arguments_are_refused(
    tracker: EmbeddedTracker, data: Any, content_type: str, named: str
) -> None:
    with pytest.raises(ValidationFailed, match=named):
        await tracker.ingest_trace_blob(data, content_type)
    assert _rows(tracker) == (0, 0)


async def test_bad_list_arguments_are_refused(tracker: EmbeddedTracker) -> None:
    cases: list[tuple[tuple[Any, ...], dict[str, Any], str]] = [
        (("",), {}, "task_id: must be a non-empty string"),
        (("t",), {"run_id": 7}, "run_id: expected a string"),
        (("t",), {"limit": True}, "limit: must be 1..1000"),
    ]
    for args, kwargs, named in cases:
        with pytest.raises(ValidationFailed, match=named):
            await tracker.list_spans(*args, **kwargs)


async def test_a_blob_is_kept_as_given(tracker: EmbeddedTracker) -> None:
    result = await tracker.ingest_trace_blob(b"\x00\x01", " application/x-protobuf ")
    assert (result.accepted_spans, result.stored) == (0, "blob")
    conn = sqlite3.connect(tracker.path)
    try:
        row = conn.execute("SELECT content_type, stored, blob FROM span_batches").fetchone()
    finally:
        conn.close()
    assert row == ("application/x-protobuf", "blob", b"\x00\x01")
