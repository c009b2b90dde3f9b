"""The request-size guard's pure parts: bulk splitting and event-data trimming."""

from __future__ import annotations

import json

import pytest

from tracker_client.errors import ValidationFailed
from tracker_client.nulltickets.limits import TRUNCATION_KEY, json_size, split_bulk, trim_event_data

BUDGET = 2_000


def _envelope(kind: str, data: object) -> int:
    return json_size({"kind": kind, "data": data})


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"stdout": "a" * 10_000, "rc": 1}, id="long-string-in-object"),
        pytest.param({"lines": ["b" * 3_000, "c" * 3_000, "short"]}, id="strings-in-a-list"),
        pytest.param("d" * 10_000, id="bare-string"),
        pytest.param(list(range(5_000)), id="numbers-only"),
        pytest.param({"q": '"\\' * 4_000}, id="escaping-heavy"),
        pytest.param({"u": "é" * 5_000}, id="multibyte"),
    ],
)
def test_trimmed_data_fits_and_says_so(data: object) -> None:
    trimmed, changed = trim_event_data("log", data, BUDGET)
    assert changed
    assert _envelope("log", trimmed) <= BUDGET
    text = json.dumps(trimmed, ensure_ascii=False)
    assert "truncated" in text  # a visible marker, never a silent cut


def test_small_data_is_untouched() -> None:
    data = {"a": 1, "b": "x" * 100}
    assert trim_event_data("log", data, BUDGET) == (data, False)


def test_object_keeps_its_small_fields_and_gets_the_marker() -> None:
    trimmed, _ = trim_event_data("log", {"stdout": "z" * 50_000, "rc": 3}, BUDGET)
    assert trimmed["rc"] == 3
    assert trimmed[TRUNCATION_KEY]["original_bytes"] > 50_000
    assert trimmed["stdout"].endswith("chars]")


def test_bulk_is_packed_in_order_under_the_budget() -> None:
    items = [json.dumps({"title": f"t{i}", "d": "x" * 90}).encode() for i in range(100)]
    chunks = split_bulk(items, BUDGET, [f"t{i}" for i in range(100)])
    assert [i for chunk in chunks for i in chunk] == list(range(100))
    for chunk in chunks:
        body = b'{"tasks":[' + b",".join(items[i] for i in chunk) + b"]}"
        assert len(body) <= BUDGET


def test_a_task_too_large_alone_is_refused_by_name() -> None:
    items = [b'{"title":"ok"}', json.dumps({"title": "huge", "d": "x" * 5_000}).encode()]
    with pytest.raises(ValidationFailed) as info:
        split_bulk(items, BUDGET, ["ok", "huge"])
    assert "task #1" in str(info.value) and "'huge'" in str(info.value)
    assert info.value.code == "request_too_large"
