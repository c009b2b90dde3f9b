"""Keeping requests under the NullTickets size limit (docs/guarantees/nulltickets.md).

The real server drops any request over 65,536 bytes without answering, so the client never sends
one: bulk creates are split into several requests, oversized event data is trimmed with a visible
marker, and any other oversized request is refused with ``ValidationFailed`` before it is sent.
"""

from __future__ import annotations

import json
from typing import Any

from tracker_client.errors import ValidationFailed

__all__ = ["HEADER_ALLOWANCE", "TRUNCATION_KEY", "json_size", "split_bulk", "trim_event_data"]

#: Bytes kept free for the request line and headers (auth, idempotency key, host, ...).
HEADER_ALLOWANCE = 1_024

#: Key added to trimmed event data (when it is an object) describing what was cut.
TRUNCATION_KEY = "_truncated"

_BULK_PREFIX = len(b'{"tasks":[]}')


def json_size(value: Any) -> int:
    """Length in bytes of ``value`` as compact UTF-8 JSON (what the client sends)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def split_bulk(items: list[bytes], body_budget: int, titles: list[str]) -> list[list[int]]:
    """Pack serialized bulk items into chunks whose ``{"tasks":[...]}`` body fits the budget.

    Returns index lists, in input order. A single item too large on its own is refused, naming
    it: it could never be sent.
    """
    chunks: list[list[int]] = []
    current: list[int] = []
    size = _BULK_PREFIX
    for index, item in enumerate(items):
        if _BULK_PREFIX + len(item) > body_budget:
            raise ValidationFailed(
                f"create_tasks: task #{index} ({titles[index][:60]!r}) is {len(item)} bytes of "
                f"JSON, over the {body_budget}-byte request budget of this tracker; shorten its "
                "description or metadata",
                code="request_too_large",
            )
        extra = len(item) + (1 if current else 0)
        if current and size + extra > body_budget:
            chunks.append(current)
            current, size = [], _BULK_PREFIX
            extra = len(item)
        current.append(index)
        size += extra
    if current:
        chunks.append(current)
    return chunks


def _longest_string(node: Any) -> tuple[int, Any, Any] | None:
    """The longest string inside ``node``: (length, container, key/index)."""
    best: tuple[int, Any, Any] | None = None
    stack: list[Any] = [node]
    while stack:
        item = stack.pop()
        pairs: list[tuple[Any, Any]]
        if isinstance(item, dict):
            pairs = list(item.items())
        elif isinstance(item, list):
            pairs = list(enumerate(item))
        else:
            continue
        for key, value in pairs:
            if isinstance(value, str):
                if best is None or len(value) > best[0]:
                    best = (len(value), item, key)
            elif isinstance(value, dict | list):
                stack.append(value)
    return best


def trim_event_data(kind: str, data: Any, budget: int) -> tuple[Any, bool]:
    """Return event ``data`` whose ``{"kind","data"}`` body fits ``budget`` bytes.

    Long strings are cut (the longest first) and end with ``…[truncated N chars]``; an object also
    gets a ``_truncated`` key with the original size. Data that still does not fit (e.g. a huge
    list of numbers) is replaced by ``{"_truncated": {...}, "preview": <start of its JSON>}``.
    Returns (data, trimmed).
    """
    envelope = json_size({"kind": kind, "data": data})
    if envelope <= budget:
        return data, False
    original = json_size(data)
    marker = {"original_bytes": original, "limit_bytes": budget}
    work: Any = json.loads(json.dumps(data))
    if isinstance(work, str):
        work = [work]
        unwrap = True
    else:
        unwrap = False
    if isinstance(work, dict):
        work[TRUNCATION_KEY] = marker
    for _ in range(64):
        size = json_size({"kind": kind, "data": work[0] if unwrap else work})
        if size <= budget:
            return (work[0] if unwrap else work), True
        found = _longest_string(work)
        if found is None or found[0] < 64:
            break
        length, container, key = found
        excess = size - budget
        text: str = container[key]
        # Each char may take several bytes once JSON-escaped: cut generously.
        keep = max(0, length - excess - 64)
        keep = min(keep, length // 2) if length - keep < excess else keep
        container[key] = f"{text[:keep]}…[truncated {length - keep} chars]"
    preview_text = json.dumps(data, ensure_ascii=False)
    room = max(0, budget - json_size({"kind": kind, "data": {TRUNCATION_KEY: marker}}) - 64)
    preview = preview_text[:room]
    while (
        preview
        and json_size({"kind": kind, "data": {TRUNCATION_KEY: marker, "preview": preview}}) > budget
    ):
        preview = preview[: len(preview) * 3 // 4]
    return {TRUNCATION_KEY: marker, "preview": preview}, True
