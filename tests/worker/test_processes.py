"""Real worker processes (``python -m worker run``) on one embedded rail, with real signals."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.anyio

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


def write_config(tmp_path: Path, db: Path, *, sleep: str, concurrency: int, grace: float) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(
        f"""
[tracker]
url = "sqlite:///{db}"

[worker]
concurrency = {concurrency}
lease_ttl_s = 1.5
idle_min_s = 0.01
idle_max_s = 0.2
shutdown_grace_s = {grace}
maintenance_interval_s = 0.3
report_flush_s = 0.1

[[roles]]
name = "coder"
executor = "command"
[roles.options]
argv = ["/bin/sleep", "{sleep}"]
"""
    )
    return path


async def seed(db: Path, n: int) -> None:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(n)])
    finally:
        await tracker.aclose()


def spawn(config: Path, *extra: str) -> subprocess.Popen[bytes]:
    # Logs go to a file (a pipe nobody reads would fill up and block the worker).
    log = config.with_name(f"worker-{len(list(config.parent.glob('worker-*.log')))}.log")
    with log.open("wb") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config), *extra],
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )


def query(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def runs_by_status(db: Path) -> dict[str, int]:
    return dict(query(db, "SELECT status, count(*) FROM runs GROUP BY status"))  # type: ignore[arg-type]


def wait_for(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


@pytest.mark.timeout(120)
async def test_three_workers_drain_300_tasks_exactly_once_despite_a_sigkill(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rail.db"
    await seed(db, 300)
    config = write_config(tmp_path, db, sleep="0.05", concurrency=4, grace=5)
    procs = [spawn(config, "--agent-id", f"w{i}") for i in range(3)]
    try:
        # Kill one worker while it holds leases.
        wait_for(lambda: runs_by_status(db).get("completed", 0) >= 30, 60)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        wait_for(
            lambda: query(db, "SELECT count(*) FROM tasks WHERE stage = 'done'")[0][0] == 300,
            90,
        )
    finally:
        for p in procs[1:]:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(30) for p in procs[1:]]
    assert codes == [0, 0]
    # Exactly once: one completed run per task, every task transitioned once (version 2).
    per_task = query(
        db,
        "SELECT t.id, t.task_version, sum(r.status = 'completed') FROM tasks t "
        "JOIN runs r ON r.task_id = t.id GROUP BY t.id",
    )
    assert len(per_task) == 300
    assert all(version == 2 and completed == 1 for _, version, completed in per_task)


@pytest.mark.timeout(60)
async def test_sigterm_drains_busy_slots_then_exits_zero(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    await seed(db, 2)
    config = write_config(tmp_path, db, sleep="1", concurrency=2, grace=10)
    proc = spawn(config)
    wait_for(lambda: runs_by_status(db).get("running", 0) == 2, 30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    # Both in-flight tasks were allowed to finish within the grace.
    assert runs_by_status(db) == {"completed": 2}


@pytest.mark.timeout(60)
async def test_second_signal_skips_the_grace(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    await seed(db, 1)
    config = write_config(tmp_path, db, sleep="60", concurrency=1, grace=60)
    proc = spawn(config)
    wait_for(lambda: runs_by_status(db).get("running", 0) == 1, 30)
    proc.send_signal(signal.SIGTERM)
    log = tmp_path / "worker-0.log"
    wait_for(lambda: "draining" in log.read_text(), 30)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    assert time.monotonic() - started < 15
    # The cancelled run was given back (released, no attempt counted) for another worker.
    [(status, error)] = query(db, "SELECT status, error FROM runs")
    assert status == "released"
    assert "worker_shutdown" in str(error)
