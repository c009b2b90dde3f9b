"""The idempotency keys of a ``finish_many``'s plain batch (rules/finish_many.py): looked up
in one statement for the whole batch and recorded in one, not one of each per item (the
served rail's worker keys every report, so each was one more statement per task on tracker
serve's database thread), answering what one look per key answered."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import Conflict
from tracker_client.models import Lease, TaskCreate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PIPE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
DONE = {"trigger": "complete"}


@pytest.fixture(autouse=True)
def _rail_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    """The rail's logger at WARNING, as a worker's and tracker serve's defaults leave it: a
    rail that writes each transition's INFO line takes the item path instead (rules/runs.py
    ``plain_move``), and an earlier test in the same process may have left it at INFO."""
    caplog.set_level(logging.WARNING, logger="backlog_worker.tracker")


async def _rail(path: Path, n: int) -> tuple[EmbeddedTracker, list[Lease]]:
    tracker = await EmbeddedTracker.open(str(path))
    pid = await tracker.create_pipeline("p", PIPE)
    await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(n)])
    leases = await tracker.claim_many("w", "coder", 60_000, n)
    assert len(leases) == n
    return tracker, leases


async def test_a_keyed_batch_looks_its_keys_up_in_one_statement(tmp_path: Path) -> None:
    """Ten keyed plain transitions: one read of the idempotency table, one write to it."""
    tracker, leases = await _rail(tmp_path / "rail.db", 10)
    ran: list[str] = []
    try:
        tracker.engine.db.conn.set_trace_callback(ran.append)
        out = await tracker.finish_many(
            [FinishItem(x, transition=DONE, idempotency_key=f"k{i}") for i, x in enumerate(leases)]
        )
    finally:
        tracker.engine.db.conn.set_trace_callback(None)
        await tracker.aclose()
    assert all(isinstance(o, FinishResult) for o in out), out
    looks = [s for s in ran if s.startswith("SELECT") and "idempotency" in s]
    assert len(looks) == 1, looks
    assert all(f'"k{i}"' in looks[0] for i in range(10))
    # the records: one statement of ten rows (an executemany steps once per row, and each
    # step gives the GIL up: on tracker serve's database thread, a wait for the event loop)
    records = [s for s in ran if s.startswith("INSERT INTO idempotency")]
    assert len(records) == 1, records
    assert all(f"'k{i}'" in records[0] for i in range(10))


async def test_one_recorded_key_sends_the_batch_down_the_item_path(tmp_path: Path) -> None:
    """A batch holding a replay and a conflict among fresh keys: the replay answers its
    record, the conflict is refused in its place, the fresh items are written, each once.
    (Keys travel to the look as a JSON array: one with quotes, a backslash and an accent
    must still be found.)"""
    odd = 'k0 "é\\'
    tracker, leases = await _rail(tmp_path / "rail.db", 4)
    try:
        first = await tracker.finish_many(
            [
                FinishItem(leases[0], transition=DONE, idempotency_key=odd),
                FinishItem(leases[1], transition=DONE, idempotency_key="k1"),
            ]
        )
        out = await tracker.finish_many(
            [
                FinishItem(leases[2], transition=DONE, idempotency_key="k2"),
                FinishItem(leases[0], transition=DONE, idempotency_key=odd),  # a replay
                FinishItem(leases[3], transition=DONE, idempotency_key="k1"),  # another run
            ]
        )
        stages = [(await tracker.get_task(x.task.id)).stage for x in leases]
        versions = [(await tracker.get_task(x.task.id)).task_version for x in leases]
    finally:
        await tracker.aclose()
    assert isinstance(out[0], FinishResult)
    assert out[1] == first[0]
    assert isinstance(out[2], Conflict) and out[2].code == "idempotency_conflict"
    assert stages == ["done", "done", "done", "todo"]
    assert versions == [2, 2, 2, 1]  # the replayed run moved once
