"""A request body is checked and encoded in one call (:func:`~tracker_client.nulltickets.codec.
encode_json`): what the encoder and a walk over containers accept leaves at once; anything else
is refused as :func:`~tracker_client.jsonlimits.check_json_limits` refuses it, naming what is
wrong, or accepted when only the fast walk doubted it (a subclass of ``str``)."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest

from tracker_client.errors import ValidationFailed
from tracker_client.jsonlimits import MAX_JSON_DEPTH, check_json_limits
from tracker_client.nulltickets.codec import encode_json

pytestmark = pytest.mark.timeout(30)


def _nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


class Colour(enum.StrEnum):
    """A ``str`` subclass: JSON to the encoder and to the walk."""

    RED = "red"


ACCEPTED = [
    {"items": [{"run_id": "r", "events": [{"kind": "k", "data": {"n": 1, "x": 2.5}}]}]},
    {"a": None, "b": True, "c": [1, "two", 3.0, (4, 5)], "d": {}},
    {"colour": Colour.RED},
    {"deepest": _nested(MAX_JSON_DEPTH - 1)},
    "just a string",
    7,
]

REFUSED = [
    ({1: "int key"}, "invalid_json", "object keys must be strings"),
    ({"a": [{"b": {None: 1}}]}, "invalid_json", "object keys must be strings"),
    ({"a": float("nan")}, "invalid_json", "NaN"),
    ({"a": [float("inf")]}, "invalid_json", "NaN"),
    ({"a": "\ud800"}, "invalid_json", "lone surrogate"),
    ({"\udfff": 1}, "invalid_json", "lone surrogate"),
    ({"a": _nested(MAX_JSON_DEPTH)}, "json_too_deep", "nested too deep"),
    ({"a": {1, 2}}, "invalid_json", "set is not a JSON value"),
    ({"a": b"bytes"}, "invalid_json", "bytes is not a JSON value"),
]


@pytest.mark.parametrize("value", ACCEPTED)
def test_plain_json_is_encoded_compactly(value: Any) -> None:
    check_json_limits(value, "body")  # the walk accepts it too
    assert encode_json(value, "body") == json.dumps(
        value, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


@pytest.mark.parametrize(("value", "code", "words"), REFUSED)
def test_what_the_walk_refuses_is_refused_naming_it(value: Any, code: str, words: str) -> None:
    with pytest.raises(ValidationFailed) as walked:
        check_json_limits(value, "finish_many")
    with pytest.raises(ValidationFailed) as encoded:
        encode_json(value, "finish_many")
    assert encoded.value.code == walked.value.code == code
    assert str(encoded.value) == str(walked.value)
    assert words in str(encoded.value) and "finish_many" in str(encoded.value)
