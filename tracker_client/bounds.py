"""The ranges of the numbers and strings a client sends: one place that the request models
(and so the OpenAPI document ``tracker serve`` serves), the rails' own checks and the docs read.

A number past these is refused with a 400 naming the field, before it reaches SQLite or
PostgreSQL (64-bit integers) or a date (year 9999 at most): ``retry_delay_ms`` of 2**63-1 once
overflowed every ``fail`` of its task, which then could never fail (docs/guarantees/edge-cases.md).

Pure: pydantic's ``Field`` only.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_AHEAD_MS",
    "MAX_DURATION_MS",
    "MAX_EPOCH_MS",
    "MAX_LIMIT",
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
#: The largest page a list or search answers.
MAX_LIMIT = 1000

#: Any 64-bit integer (priorities, versions).
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
#: A count: 0 .. 2**63-1 (attempts).
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
#: A duration in milliseconds: 0 .. :data:`MAX_DURATION_MS`.
DurationMs = Annotated[int, Field(ge=0, le=MAX_DURATION_MS)]
#: A duration of at least 1 ms (a TTL).
PositiveDurationMs = Annotated[int, Field(ge=1, le=MAX_DURATION_MS)]
#: A point in time, epoch milliseconds: 0 .. :data:`MAX_EPOCH_MS`.
EpochMs = Annotated[int, Field(ge=0, le=MAX_EPOCH_MS)]
#: A string that must not be empty (keys, ids, names).
NonEmpty = Annotated[str, Field(min_length=1)]
