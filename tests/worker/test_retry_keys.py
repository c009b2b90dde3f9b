"""The worker's idempotency keys lead with the time (worker/retry.py): the rail's idempotency
index then grows at its right edge instead of taking a random page per write
(docs/benchmarks/retention.md)."""

from __future__ import annotations

import time

import pytest

from tests.worker.runkit import FAST_RETRY
from worker.retry import TrackerCalls

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]


def _ms(key: str) -> int:
    return int(key.replace("-", "")[:12], 16)


async def test_write_keys_lead_with_the_time_and_stay_distinct() -> None:
    calls = TrackerCalls(FAST_RETRY, keys=True)
    seen: list[str | None] = []

    async def send(key: str | None) -> None:
        seen.append(key)

    before = time.time_ns() // 1_000_000
    await calls.write("finish", send, budget_s=None)
    fresh = calls.new_key()
    after = time.time_ns() // 1_000_000
    keys = [k for k in (*seen, fresh) if k is not None]
    assert len(keys) == 2 and keys[0] != keys[1]
    assert all(before <= _ms(k) <= after for k in keys), (before, keys, after)
