"""Checkpoint pacing in a real Worker on a real embedded rail: ``ctx.checkpoint`` keeps the
latest value in memory; the keeper's heartbeat carries it, its flush writes it alone once the
interval passed, and the report writes a pending one first. The rail's own heartbeat and
checkpoint methods are counted (wrapped on the instance), nothing else is faked.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext, Outcome, Transition
from tracker_client.agent_models import UNSET
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker
from worker.lease import agents as lease_agents

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "agent"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


def count_writes(tracker: Tracker, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count heartbeats carrying a checkpoint, and checkpoint writes of their own."""
    counts = {"heartbeat": 0, "heartbeat_with_checkpoint": 0, "checkpoint": 0}
    heartbeat, checkpoint = tracker.heartbeat, tracker.checkpoint

    async def counted_heartbeat(lease: Any, **kw: Any) -> int:
        counts["heartbeat"] += 1
        if kw.get("checkpoint", UNSET) is not UNSET:
            counts["heartbeat_with_checkpoint"] += 1
        return await heartbeat(lease, **kw)

    async def counted_checkpoint(lease: Any, data: Any) -> None:
        counts["checkpoint"] += 1
        await checkpoint(lease, data)

    monkeypatch.setattr(tracker, "heartbeat", counted_heartbeat)
    monkeypatch.setattr(tracker, "checkpoint", counted_checkpoint)
    return counts


async def drain(tracker: Tracker, tmp_path: Path, executor: Any, lease_ttl_s: float) -> None:
    role = Role(RoleConfig(name="agent", executor="python"), executor)
    config = WorkerConfig(
        agent_id="w1",
        concurrency=1,
        lease_ttl_s=lease_ttl_s,
        idle_min_s=0.01,
        idle_max_s=0.1,
        report_flush_s=0.05,
        workdir=tmp_path / "runs",
        drain=True,
    )
    with anyio.fail_after(45):
        await Worker(tracker, config, [role]).run()


async def add_task(tracker: Tracker) -> str:
    pid = await tracker.create_pipeline("flow", PIPELINE)
    policy = RetryPolicy(max_attempts=2, retry_delay_ms=50)
    return await tracker.create_task(TaskCreate(pipeline_id=pid, title="t", retry_policy=policy))


class Looping:
    """Checkpoints on every step for ~1.5 s (heartbeats every second), fails the first attempt;
    the second reports what it got."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        if ctx.attempt > 1:
            self.seen.append(ctx.previous_checkpoint)
            return Transition("complete")
        step = 0
        with anyio.move_on_after(1.5):
            while True:
                step += 1
                await ctx.checkpoint({"step": step})
                await anyio.sleep(0.002)
        await ctx.checkpoint({"step": "last"})
        raise RuntimeError("fail the first attempt")


async def test_many_checkpoints_cost_a_few_writes_and_the_last_one_wins(
    tracker: Tracker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = await add_task(tracker)
    counts = count_writes(tracker, monkeypatch)
    executor = Looping()
    await drain(tracker, tmp_path, executor, lease_ttl_s=3.0)
    assert (await tracker.get_task(task_id)).stage == "done"
    assert executor.seen == [{"step": "last"}]  # the pending one was written before the fail
    writes = counts["heartbeat_with_checkpoint"] + counts["checkpoint"]
    # hundreds of ctx.checkpoint calls: a heartbeat or two carried one, the report the last
    assert 1 <= writes <= 6, counts
    assert counts["heartbeat_with_checkpoint"] >= 1, counts


class WaitsForItsCheckpoint:
    """Checkpoints once, then waits until the rail has it (no heartbeat is due meanwhile)."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def stored(self, run_id: str) -> Any:
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True) as conn:
            row = conn.execute("SELECT checkpoint FROM runs WHERE id = ?", (run_id,)).fetchone()
        return row[0] if row else None

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        await ctx.checkpoint({"half": True})
        with anyio.fail_after(10):
            while await anyio.to_thread.run_sync(self.stored, ctx.run.id) is None:
                await anyio.sleep(0.02)
        return Transition("complete")


async def test_a_pending_checkpoint_is_written_alone_once_the_interval_passed(
    tracker: Tracker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_agents, "CHECKPOINT_INTERVAL_S", 0.1)
    task_id = await add_task(tracker)
    counts = count_writes(tracker, monkeypatch)
    # a 60 s lease: the first heartbeat would come after 20 s, long after the test is done
    await drain(tracker, tmp_path, WaitsForItsCheckpoint(tmp_path / "rail.db"), lease_ttl_s=60)
    assert (await tracker.get_task(task_id)).stage == "done"
    assert counts == {"heartbeat": 0, "heartbeat_with_checkpoint": 0, "checkpoint": 1}


class ChangesItsCheckpointAfterTheCall:
    """Checkpoints a value, then grows it past 64 KiB (kept by reference): the rail refuses it
    when it is written; the run goes on and ends well, nothing of it stored."""

    def __init__(self, caplog: pytest.LogCaptureFixture, db: Path) -> None:
        self.caplog = caplog
        self.db = db

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        state = {"blob": ""}
        await ctx.checkpoint(state)
        state["blob"] = "x" * 70_000
        with anyio.fail_after(20):
            while not any("checkpoint not written" in r.getMessage() for r in self.caplog.records):
                await anyio.sleep(0.02)
        await ctx.report("after", {"ok": True}, flush=True)
        return Transition("complete")


@pytest.mark.parametrize("path", ["heartbeat", "flush"])
async def test_a_checkpoint_the_rail_refuses_is_logged_and_the_run_goes_on(
    tracker: Tracker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    path: str,
) -> None:
    if path == "flush":  # written alone, long before the first heartbeat
        monkeypatch.setattr(lease_agents, "CHECKPOINT_INTERVAL_S", 0.1)
    task_id = await add_task(tracker)
    executor = ChangesItsCheckpointAfterTheCall(caplog, tmp_path / "rail.db")
    with caplog.at_level("WARNING", logger="backlog_worker.worker"):
        await drain(tracker, tmp_path, executor, lease_ttl_s=1.5 if path == "heartbeat" else 60)
    assert (await tracker.get_task(task_id)).stage == "done"
    (message,) = {r.getMessage() for r in caplog.records if "checkpoint not written" in r.message}
    assert "too large" in message and "65536" in message
    events = (await tracker.list_task_events(task_id, limit=100)).items
    assert [e.data for e in events if e.kind == "after"] == [{"ok": True}]
    with sqlite3.connect(f"file:{tmp_path / 'rail.db'}?mode=ro", uri=True) as conn:
        stored = conn.execute("SELECT checkpoint FROM runs WHERE task_id = ?", (task_id,))
        assert [row[0] for row in stored] == [None]
