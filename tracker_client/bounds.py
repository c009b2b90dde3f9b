"""The ranges of the numbers and strings a client sends: one place that the request models
(and so the OpenAPI document ``tracker serve`` serves), the rails' own checks and the docs read.

The models state a range in their JSON schema (the annotated types below); the rails apply it
with these same constants, in their own words (``... is more than ten years ahead; is it in
the wrong unit?``), on every rail and before anything is written, so a number past them is a
400 naming the field before it reaches SQLite or PostgreSQL (64-bit integers) or a date (year
9999 at most): ``retry_delay_ms`` of 2**63-1 once overflowed every ``fail`` of its task, which
then could never fail (docs/guarantees/edge-cases.md). A model built in code is not refused by
them: the rail's answer is the one error a caller handles.

Pure: pydantic's ``Field`` only.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_AHEAD_MS",
    "MAX_DEDUPE_KEY_CHARS",
    "MAX_DURATION_MS",
    "MAX_EPOCH_MS",
    "MAX_LEASE_TTL_MS",
    "MAX_LIMIT",
    "MAX_TITLE_CHARS",
    "MAX_WAIT_MS",
    "AheadMs",
    "Count",
    "DurationMs",
    "EpochMs",
    "Int64",
    "NonEmpty",
    "PositiveDurationMs",
]

#: The integers a rail stores (SQLite ``INTEGER``, PostgreSQL ``BIGINT``).
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: The furthest ahead a task may be scheduled (``run_at_ms``/``delay_ms``) or deduped
#: (``dedupe_window_ms``): ten years. Further is almost surely a unit mistake, so it is refused.
MAX_AHEAD_MS = 10 * 366 * 86_400_000
#: The longest delay, TTL or window in milliseconds (retry delays, queue TTLs): ten years, so
#: that now plus it is a date and a 64-bit number.
MAX_DURATION_MS = MAX_AHEAD_MS
#: The latest time a client may give (epoch ms): 9999-12-31T23:59:59.999Z, the last date.
MAX_EPOCH_MS = 253_402_300_799_999
#: Longest lease either side accepts at claim (a NullTickets heartbeat cuts it to 300 s anyway).
MAX_LEASE_TTL_MS = 86_400_000
#: The largest page a list or search answers.
MAX_LIMIT = 1000
#: The longest a long poll (``wait``, ``follow``, ``wait_for_work``) waits per request.
MAX_WAIT_MS = 60_000
#: The longest task title, and dedupe key, in characters.
MAX_TITLE_CHARS = 4096
MAX_DEDUPE_KEY_CHARS = 1024


def _range(low: int, high: int) -> Any:
    """The JSON-schema range of an integer field (applied by the rails, see the module)."""
    return Field(json_schema_extra={"minimum": low, "maximum": high})


#: Any 64-bit integer (priorities, versions).
Int64 = Annotated[int, _range(INT64_MIN, INT64_MAX)]
#: A count: 0 .. 2**63-1 (attempts).
Count = Annotated[int, _range(0, INT64_MAX)]
#: A duration in milliseconds: 0 .. :data:`MAX_DURATION_MS`.
DurationMs = Annotated[int, _range(0, MAX_DURATION_MS)]
#: A duration of at least 1 ms (a TTL).
PositiveDurationMs = Annotated[int, _range(1, MAX_DURATION_MS)]
#: A point in time, epoch milliseconds: 0 .. :data:`MAX_EPOCH_MS`.
EpochMs = Annotated[int, _range(0, MAX_EPOCH_MS)]
#: How far ahead (``delay_ms``, ``dedupe_window_ms``): 0 .. :data:`MAX_AHEAD_MS`.
AheadMs = Annotated[int, _range(0, MAX_AHEAD_MS)]
#: A string that must not be empty (keys, ids, names, kinds).
NonEmpty = Annotated[str, Field(json_schema_extra={"minLength": 1})]
