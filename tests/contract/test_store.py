"""The KV store and its full-text search."""

from __future__ import annotations

import re

import pytest

from tests.contract.support import CLOCK, FakeClock
from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


@pytest.mark.requires(CLOCK)
async def test_put_get_and_upsert_keeps_created_at(tracker: Tracker, clock: FakeClock) -> None:
    created = clock()
    await tracker.store_put("team a", "key/1", {"msg": "hello", "n": 1})
    entry = await tracker.store_get("team a", "key/1")
    assert (entry.namespace, entry.key, entry.value) == (
        "team a",
        "key/1",
        {"msg": "hello", "n": 1},
    )
    assert entry.created_at_ms == entry.updated_at_ms == created
    clock.advance(500)
    await tracker.store_put("team a", "key/1", ["now", "a", "list"])
    entry = await tracker.store_get("team a", "key/1")
    assert entry.value == ["now", "a", "list"]
    assert (entry.created_at_ms, entry.updated_at_ms) == (created, created + 500)


async def test_any_json_value(tracker: Tracker) -> None:
    values: list[object] = ["text", 42, 1.5, True, None, [], {"a": {"b": [1, None]}}]
    for i, value in enumerate(values):
        await tracker.store_put("values", f"k{i}", value)
        assert (await tracker.store_get("values", f"k{i}")).value == value


async def test_missing_key_and_deletes(tracker: Tracker) -> None:
    with pytest.raises(NotFound):
        await tracker.store_get("ns", "missing")
    await tracker.store_delete("ns", "missing")  # absent keys are fine
    await tracker.store_put("ns", "b", 2)
    await tracker.store_put("ns", "a", 1)
    await tracker.store_put("ns", "c", 3)
    await tracker.store_put("other", "a", 9)
    assert [(e.key, e.value) for e in await tracker.store_list("ns")] == [
        ("a", 1),
        ("b", 2),
        ("c", 3),
    ]
    await tracker.store_delete("ns", "b")
    assert [e.key for e in await tracker.store_list("ns")] == ["a", "c"]
    await tracker.store_delete_namespace("ns")
    assert await tracker.store_list("ns") == []
    assert await tracker.store_list("never-used") == []
    assert [e.value for e in await tracker.store_list("other")] == [9]


async def test_search_namespace_is_reserved(tracker: Tracker) -> None:
    with pytest.raises(ValidationFailed) as err:
        await tracker.store_put("search", "k", 1)
    assert err.value.code == "reserved_namespace"
    assert "search" in str(err.value)


async def test_search_ands_words_as_phrases(tracker: Tracker) -> None:
    await tracker.store_put("notes", "n1", {"msg": "hello brave world"})
    await tracker.store_put("notes", "n2", {"msg": "hello there"})
    await tracker.store_put("docs", "d1", {"text": "brave new world"})

    async def keys(q: str, **kw: object) -> set[str]:
        return {e.key for e in await tracker.store_search(q, **kw)}  # type: ignore[arg-type]

    assert await keys("hello") == {"n1", "n2"}
    assert await keys("hello world") == {"n1"}
    assert await keys("brave world") == {"n1", "d1"}
    assert await keys("world", namespace="docs") == {"d1"}
    assert await keys("hel*") == set()  # no prefix operator
    assert await keys("hello OR nothing") == set()  # OR is a word, not an operator
    assert await keys('"hello') == {"n1", "n2"}  # a stray quote is no syntax error
    assert await keys("msg") == {"n1", "n2"}  # JSON field names are indexed
    assert await keys("notes") == {"n1", "n2"}  # the namespace is indexed
    assert await keys("n2") == {"n2"}  # the key is indexed


async def test_search_sees_updates_and_deletes(tracker: Tracker) -> None:
    await tracker.store_put("notes", "n1", {"msg": "alpha"})
    await tracker.store_put("notes", "n1", {"msg": "beta"})
    assert await tracker.store_search("alpha") == []
    assert [e.value for e in await tracker.store_search("beta")] == [{"msg": "beta"}]
    await tracker.store_delete("notes", "n1")
    assert await tracker.store_search("beta") == []


async def test_search_filter_path_and_limit(tracker: Tracker) -> None:
    for i in range(15):
        status = "open" if i % 3 else "closed"
        await tracker.store_put("tickets", f"t{i:02d}", {"status": status, "body": "printer jam"})
    assert len(await tracker.store_search("printer")) == 10  # default limit
    assert len(await tracker.store_search("printer", limit=12)) == 12
    closed = await tracker.store_search(
        "printer", limit=100, filter_path="$.status", filter_value="closed"
    )
    assert sorted(e.key for e in closed) == ["t00", "t03", "t06", "t09", "t12"]


@pytest.mark.parametrize("query", ["", "   ", "\t\n"])
async def test_empty_search_is_refused(tracker: Tracker, query: str) -> None:
    with pytest.raises(ValidationFailed) as err:
        await tracker.store_search(query)
    assert err.value.code == "invalid_query"


@pytest.mark.parametrize("limit", [0, 1001])
async def test_search_limit_out_of_range(tracker: Tracker, limit: int) -> None:
    with pytest.raises(ValidationFailed) as err:
        await tracker.store_search("x", limit=limit)
    assert err.value.code == "invalid_limit"


@pytest.mark.parametrize(
    ("query", "options", "says"),
    [
        ("print\x00er", {}, "search query must not contain a NUL"),
        ("printer", {"namespace": "tick\x00ets"}, "namespace must not contain a NUL"),
        ("printer", {"filter_path": "$.status", "filter_value": "x\x00"}, "filter_value must"),
        (" ".join(["printer"] * 65), {}, "search query has 65 words; at most 64"),
        (" ".join(["w"] * 5_000), {}, "search query has 5000 words; at most 64"),
        ("printer", {"filter_path": "$.status ? (@ == $x)", "filter_value": "1"}, "filter_path"),
        ("printer", {"filter_path": "$.n + 1", "filter_value": "1"}, "filter_path must be"),
        ("printer", {"filter_path": "$.items[*]", "filter_value": "1"}, "filter_path must be"),
        ("printer", {"filter_path": "status", "filter_value": "1"}, "filter_path must be"),
    ],
    ids=[
        "nul",
        "nul-namespace",
        "nul-value",
        "65-words",
        "5000-words",
        "variable",
        "math",
        "*",
        "$",
    ],
)
async def test_search_input_no_rail_can_search_for_is_refused_as_such(
    tracker: Tracker, query: str, options: dict[str, str], says: str
) -> None:
    """A client's mistake is a 400 naming it (``ValidationFailed``), never an outage that
    clients retry (was 503 on SQLite for a NUL, on PostgreSQL for 5,000 words or a jsonpath
    variable)."""
    await tracker.store_put("tickets", "t1", {"status": "open", "n": 1, "body": "printer jam"})
    with pytest.raises(ValidationFailed, match=re.escape(says)) as err:
        await tracker.store_search(query, **options)  # type: ignore[arg-type]
    assert err.value.code == "invalid_query"


async def test_search_takes_64_words_and_plain_paths(tracker: Tracker) -> None:
    await tracker.store_put("tickets", "t1", {"status": "open", "a key": [{"n": "7"}]})
    assert [e.key for e in await tracker.store_search(" ".join(["open"] * 64))] == ["t1"]
    for path, value in (("$.status", "open"), ('$."a key"[0].n', "7")):
        found = await tracker.store_search("open", filter_path=path, filter_value=value)
        assert [e.key for e in found] == ["t1"], path
