"""plugins.results.json_problem: every value that is not JSON is named with its place."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.results import json_problem


def _circular() -> list[Any]:
    loop: list[Any] = [1]
    loop.append({"back": loop})
    return loop


def _deep() -> list[Any]:
    deep: list[Any] = []
    for _ in range(300):
        deep = [deep]
    return deep


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (_circular(), "the result[1]['back'] contains itself"),
        (_deep(), "is nested more than 200 levels deep"),
        ({"when": float("inf")}, "the result['when'] is the float inf, not JSON"),
        ({(1, 2): "pair"}, "the result has the key (1, 2) (a tuple); JSON object keys are strings"),
        ([b"bytes"], "the result[0] is a bytes, not a JSON value"),
    ],
)
def test_what_is_not_json_is_named(value: object, problem: str) -> None:
    found = json_problem(value)
    assert found is not None and problem in found


def test_a_shared_part_is_not_a_cycle() -> None:
    shared = {"k": [1, 2]}
    assert json_problem({"a": shared, "b": shared, "t": (1, "x", None, True, 2.5)}) is None
