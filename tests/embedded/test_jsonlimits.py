"""The JSON depth/shape checker: limits named in the error, no recursion on huge inputs."""

from __future__ import annotations

from typing import Any

import pytest

from tracker_client.errors import ValidationFailed
from tracker_client.jsonlimits import MAX_JSON_DEPTH, check_json_limits


def nested(depth: int, *, leaf: Any = 1) -> Any:
    value: Any = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
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
