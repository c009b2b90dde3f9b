"""A run ended by the worker's shutdown gives the task back without spending an attempt.

Real worker processes on one embedded rail, real SIGTERM. Before, the shutdown was reported as
a failure: a task with ``max_attempts`` 1 was dead-lettered by one ``systemctl restart``.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.worker.test_processes import (
    PIPELINE,
    query,
    runs_by_status,
    spawn,
    wait_for,
    write_config,
)
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, TaskCreate

pytestmark = pytest.mark.anyio


@pytest.mark.timeout(90)
async def test_sigterm_mid_run_keeps_the_attempt_budget_and_the_task_comes_back_at_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        # one attempt, and an hour between retries: a counted failure would show either way
        policy = RetryPolicy(max_attempts=1, retry_delay_ms=3_600_000)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t", retry_policy=policy))
    finally:
        await tracker.aclose()

    (tmp_path / "slow").mkdir()
    (tmp_path / "fast").mkdir()
    slow = write_config(tmp_path / "slow", db, sleep="60", concurrency=1, grace=0.2)
    proc = spawn(slow)
    try:
        wait_for(lambda: runs_by_status(db).get("running", 0) == 1, 30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    released_at = time.time() * 1000

    [(status, error)] = query(db, "SELECT status, error FROM runs")
    assert status == "released"
    assert "worker_shutdown" in str(error)
    [(failed, dead, eligible)] = query(
        db, "SELECT failed_attempts, dead_letter_reason, next_eligible_at_ms FROM tasks"
    )
    assert (failed, dead) == (0, None)
    assert eligible <= released_at  # claimable now, not after the hour

    fast = write_config(tmp_path / "fast", db, sleep="0.05", concurrency=1, grace=5)
    second = spawn(fast, "--drain")
    try:
        assert second.wait(60) == 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(10)
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        task = await tracker.get_task(tid)
        assert (task.stage, task.dead_letter_reason) == ("done", None)
        assert [r.status for r in await tracker.list_runs(tid)] == ["released", "completed"]
    finally:
        await tracker.aclose()
