"""The JSON depth/shape checker: limits named in the error, no recursion on huge inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import ValidationFailed
from tracker_client.jsonlimits import MAX_JSON_DEPTH, check_json_limits
from tracker_client.models import TaskCreate


def nested(depth: int, *, leaf: Any = 1) -> Any:
    value: Any = leaf
    for i in range(depth):
        # the outermost level is an object (metadata must be one)
        value = {"k": value} if (depth - 1 - i) % 2 == 0 else [value]
    return value


def test_depth_at_the_limit_is_accepted() -> None:
    check_json_limits(nested(MAX_JSON_DEPTH), "metadata")
    check_json_limits({"a": [1, 2.5, "x", None, True], "b": {}}, "metadata")
    check_json_limits("plain", "metadata")


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 256, 100_000])
def test_deeper_is_refused_naming_the_limit(depth: int) -> None:
    with pytest.raises(ValidationFailed, match=f"metadata is nested too deep.*{MAX_JSON_DEPTH}"):
        check_json_limits(nested(depth), "metadata")


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"x": float("nan")}, "NaN"),
        ([float("inf")], "NaN and infinities"),
        ({"x": "\ud800"}, "lone surrogate"),
        ({"\udfff": 1}, "lone surrogate"),
        ({1: "x"}, "keys must be strings"),
        ({"x": {1, 2}}, "set is not a JSON value"),
    ],
)
def test_non_json_is_refused(value: Any, match: str) -> None:
    with pytest.raises(ValidationFailed, match=match):
        check_json_limits(value, "event data")


PIPE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


@pytest.mark.anyio
@pytest.mark.parametrize("key", [None, "key-1"])
async def test_embedded_refuses_values_deep_enough_to_overflow_json(
    tmp_path: Path, key: str | None
) -> None:
    """5,000 levels: past ``json.dumps``'s recursion (and the idempotency fingerprint's)."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        with pytest.raises(ValidationFailed, match=f"limit {MAX_JSON_DEPTH}"):
            await tracker.create_task(
                TaskCreate(pipeline_id=pid, title="t", metadata=nested(5000)), idempotency_key=key
            )
        with pytest.raises(ValidationFailed, match=f"limit {MAX_JSON_DEPTH}"):
            await tracker.create_pipeline(
                "deep", {**PIPE, "notes": nested(5000)}, idempotency_key=key
            )
        with pytest.raises(ValidationFailed, match=f"limit {MAX_JSON_DEPTH}"):
            await tracker.store_put("ns", "k", nested(5000))
        assert (await tracker.list_tasks()).items == []
        assert [p.name for p in await tracker.list_pipelines()] == ["p"]
    finally:
        await tracker.aclose()
