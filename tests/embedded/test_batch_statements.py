"""What a worker's batches cost the embedded rail in statements and commits: a keyed
``claim_many`` reads the rail's key once, not once per lease."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.anyio

PIPE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


async def _seeded(path: Path, n: int) -> EmbeddedTracker:
    tracker = await EmbeddedTracker.open(str(path))
    pid = await tracker.create_pipeline("p", PIPE)
    await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(n)])
    return tracker


async def test_a_keyed_claim_many_reads_the_rail_key_once(tmp_path: Path) -> None:
    tracker = await _seeded(tmp_path / "rail.db", 6)
    ran: list[str] = []
    try:
        await tracker.claim_many("w", "coder", 60_000, 1, idempotency_key="k0")  # makes the key
        tracker.engine.db.conn.set_trace_callback(ran.append)
        leases = await tracker.claim_many("w", "coder", 60_000, 5, idempotency_key="k")
        tracker.engine.db.conn.set_trace_callback(None)
        again = await tracker.claim_many("w", "coder", 60_000, 5, idempotency_key="k")
    finally:
        tracker.engine.db.conn.set_trace_callback(None)
        await tracker.aclose()
    assert len(leases) == 5
    assert len([s for s in ran if "FROM rail_secrets" in s]) == 1
    # the tokens are still derived from the key: a replay answers the same ones
    assert [x.lease_token.get_secret_value() for x in again] == [
        x.lease_token.get_secret_value() for x in leases
    ]
