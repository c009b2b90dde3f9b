"""A PostgreSQL claim's run ids lead with the time, as the embedded claim's do.

Runs are found by id (``runs_pkey``) and their events indexed by it (``events_run``): ids in
claim order append to those b-trees, where random ones wrote a random leaf page per run, a page
that on a rail keeping many finished runs is seldom in memory and costs a full-page image in
the WAL after each checkpoint (docs/benchmarks/retention.md).
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.contract.support import make_pipeline, new_task
from tests.postgres.server import fresh_schema_url
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _ms(run_id: str) -> int:
    """The wall-clock ms a time-led id carries in its first 48 bits."""
    return int(run_id.replace("-", "")[:12], 16)


async def test_claimed_run_ids_lead_with_the_claim_time(quiet_tracker_log: None) -> None:
    tracker = await open_tracker(fresh_schema_url(f"runids-{uuid.uuid4()}"))
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(4)])
        before = time.time_ns() // 1_000_000
        one = await tracker.claim("agent-1", "coder", 60_000)
        many = await tracker.claim_many("agent-1", "coder", 60_000, 3)
        after = time.time_ns() // 1_000_000
    finally:
        await tracker.aclose()
    assert one is not None and len(many) == 3
    stamps = [_ms(lease.run_id) for lease in (one, *many)]
    assert all(before <= ms <= after for ms in stamps), (before, stamps, after)
    assert len({lease.run_id for lease in (one, *many)}) == 4


def test_ids_made_together_have_fresh_ids_layouts() -> None:
    """A claim's ids made together (one read of the random source) are what ``fresh_ids``
    makes one at a time: run ids leading with the claim's ms, canonical UUIDv4 texts, all
    distinct; tokens 64 hex digits, or empty for a keyed claim (it derives its own)."""
    from tracker_client.rules.claims import fresh_ids, fresh_ids_many

    now = 1_767_000_000_000
    ids = fresh_ids_many(now, 500)
    assert len(ids) == 500
    one = fresh_ids(now)
    for run_id, lease_id, token in ids:
        for text in (run_id, lease_id):
            parsed = uuid.UUID(text)
            assert str(parsed) == text and parsed.version == 4
            assert parsed.variant == uuid.RFC_4122
        assert _ms(run_id) == _ms(one[0]) == now
        assert len(token) == len(one[2]) == 64 and int(token, 16) >= 0
    assert len({i for row in ids for i in row}) == 1500
    variants = {lease_id[19] for _, lease_id, _ in ids}
    assert variants == set("89ab")  # every variant digit occurs (500 draws)
    keyed = fresh_ids_many(now, 3, random_tokens=False)
    assert [token for _, _, token in keyed] == ["", "", ""]
    assert all(_ms(run_id) == now for run_id, _, _ in keyed)
