"""What budgets cost a transition on the embedded rail (docs/operate/budgets.md): nothing on a
pipeline without a loop (the common case: no statement added), one read and one write of the
task's row on a move into a stage on a loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.anyio

STATES = {"a": {"agent_role": "r"}, "b": {"agent_role": "s"}, "done": {"terminal": True}}
STRAIGHT = {
    "initial": "a",
    "states": STATES,
    "transitions": [
        {"from": "a", "to": "b", "trigger": "go"},
        {"from": "b", "to": "done", "trigger": "go"},
    ],
}
BACK = {"from": "b", "to": "a", "trigger": "back"}
LOOP = {**STRAIGHT, "transitions": [*STRAIGHT["transitions"], BACK]}


async def _statements(tmp_path: Path, definition: dict[str, Any]) -> list[str]:
    """The statements one transition a -> b runs."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    statements: list[str] = []
    try:
        pid = await tracker.create_pipeline("p", definition)
        await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        lease = await tracker.claim("w", "r", 60_000)
        assert lease is not None
        tracker.engine.db.conn.set_trace_callback(statements.append)
        await tracker.transition(lease, "go")
    finally:
        tracker.engine.db.conn.set_trace_callback(None)
        await tracker.aclose()
    return statements


async def test_a_move_on_a_pipeline_without_a_loop_runs_no_budget_statement(
    tmp_path: Path,
) -> None:
    ran = await _statements(tmp_path, STRAIGHT)
    # (the lease read names t.budgets: one more column of the row it reads anyway)
    assert not [s for s in ran if "spent_usd" in s or "visits" in s or "budget_" in s]


async def test_a_move_into_a_loop_reads_and_writes_the_task_once(tmp_path: Path) -> None:
    straight = await _statements(tmp_path / "s", STRAIGHT)
    ran = await _statements(tmp_path / "l", LOOP)
    budget = [s for s in ran if "spent_usd" in s or "visits" in s]
    assert len(budget) == 2, budget
    assert budget[0].startswith("SELECT budgets") and budget[1].startswith(
        "UPDATE tasks SET visits"
    )
    assert len(ran) == len(straight) + 2
