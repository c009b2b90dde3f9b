"""A plain report's idempotency fingerprint made the short way (``tracker._fingerprint``).

The one-round-trip report stores the fingerprint of its arguments with its key; a retry that
goes the rail's other way compares it with :func:`~tracker_client.rules.idempotency.fingerprint`
of the same arguments, so the two must agree on every input, including those whose values
compare equal across types (``1``, ``True``, ``1.0``) and those it hands back to
``fingerprint`` (nested objects, floats, non-string keys).
"""

from __future__ import annotations

from typing import Any

import pytest

from tracker_client.errors import ValidationFailed
from tracker_client.postgres.tracker import REMEMBERED, _fingerprint
from tracker_client.rules.idempotency import fingerprint

RUN = "01a24c44-c93c-4ae2-9e25-ea42ba5a2dc7"
DIGEST = "bcc1200804ae4cb32b793c71b45637a0cf8050d73a97c95941c9109b187e7266"

BODIES: list[dict[Any, Any]] = [
    {"trigger": "complete"},
    {"trigger": "complete", "expected_stage": "todo", "expected_task_version": 1},
    {"trigger": "complete", "expected_stage": "todo", "expected_task_version": True},
    {"trigger": "complete", "expected_stage": "todo", "expected_task_version": 1.0},
    {"expected_task_version": 1, "trigger": "complete", "expected_stage": "todo"},
    {"trigger": "complete", "instructions": None, "usage": None},
    {"trigger": 'zoë \u2028 "quoted" \\ back', "instructions": "line\nbreak \x00"},
    {"trigger": "complete", "usage": {"cost": {"usd": 0.5, "tokens": 10}}},
    {"trigger": "complete", "usage": {"tokens": [1, 2]}},
    {"trigger": "complete", "usage": float("inf")},
    {1: "a"},
    {True: "a"},
    {"trigger": False},
    {"trigger": 0},
    {},
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_the_short_way_agrees_with_fingerprint(body: dict[Any, Any]) -> None:
    texts: dict[Any, str] = {}
    cases: list[list[Any]] = [
        [RUN, DIGEST, [], body, None],
        [RUN, DIGEST, "complete", "todo", 3, None, None],
        [RUN, DIGEST, "complete", None, True, "\u00e9", body],
    ]
    for args in cases:
        try:
            expected = fingerprint(args)
        except ValidationFailed as exc:  # refused the same way
            with pytest.raises(ValidationFailed, match=str(exc)):
                _fingerprint(args, texts)
            continue
        assert _fingerprint(args, texts) == expected
        assert _fingerprint(args, texts) == expected  # and again, its object's text kept


def test_values_equal_across_types_are_not_one_text() -> None:
    texts: dict[Any, str] = {}
    seen = set()
    for version in (1, True, 1.0, "1"):
        args: list[Any] = [RUN, DIGEST, [], {"trigger": "t", "expected_task_version": version}]
        found = _fingerprint(args, texts)
        assert found == fingerprint(args)
        seen.add(found)
    assert len(seen) == 4


def test_the_kept_texts_stay_bounded() -> None:
    texts: dict[Any, str] = {}
    for n in range(REMEMBERED * 2):
        args: list[Any] = [RUN, DIGEST, [], {"trigger": "t", "expected_task_version": n}]
        assert _fingerprint(args, texts) == fingerprint(args)
        assert len(texts) <= REMEMBERED
