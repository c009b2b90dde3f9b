"""``backlog-worker run --drain`` waits for the retries of its roles' failed tasks.

Real ``backlog-worker run --drain`` processes on a real SQLite rail with a command executor. With
the rail's bounded default retry policy a failed task comes back after a delay (0.5-1 s first);
the drain used to exit 0 with "queue drained" in that gap, so a flaky task got one attempt in
batch mode. Now "drained" means nothing of its roles is claimable, waiting for a retry, or
running anywhere. Also: a run given back at shutdown is counted ``released``, not ``failed``.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext
from tests.worker.conftest import role, start_worker, worker_config
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from worker.daemon import Worker

pytestmark = pytest.mark.anyio

#: Fails (exit 1) while the marker file is missing and creates it; succeeds once it is there.
FLAKY = """
import pathlib, sys
marker = pathlib.Path(sys.argv[1])
if marker.exists():
    sys.exit(0)
marker.write_text("failed once")
sys.exit(1)
"""


def _pipeline(retry: dict[str, Any] | None = None) -> dict[str, Any]:
    definition: dict[str, Any] = {
        "initial": "todo",
        "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
        "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
    }
    if retry is not None:
        definition["retry"] = retry
    return definition


def _config(tmp_path: Path, db: Path, argv: list[str]) -> Path:
    path = tmp_path / "worker.toml"
    quoted = ", ".join(json.dumps(a) for a in argv)
    # idle_max_s far above the retry delays: the drain must wake for the retry itself
    path.write_text(
        f"""
[tracker]
url = "sqlite:///{db}"

[worker]
concurrency = 1
idle_min_s = 0.05
idle_max_s = 30
report_flush_s = 0.1

[[roles]]
name = "coder"
executor = "command"
[roles.options]
argv = [{quoted}]
"""
    )
    return path


async def _seed(db: Path, definition: dict[str, Any]) -> str:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("flow", definition)
        return await tracker.create_task(TaskCreate(pipeline_id=pid, title="flaky"))
    finally:
        await tracker.aclose()


def _drain(config: Path, timeout_s: float) -> tuple[int, str, float]:
    """Run ``backlog-worker run --drain`` to its end: (exit code, its log, seconds taken)."""
    log = config.with_name("worker.log")
    started = time.monotonic()
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config), "--drain"],
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )
        try:
            code = proc.wait(timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    return code, log.read_text(), time.monotonic() - started


def _runs(db: Path, task_id: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT status FROM runs WHERE task_id = ? ORDER BY attempt", (task_id,)
        ).fetchall()
    return [r[0] for r in rows]


def _task(db: Path, task_id: str) -> tuple[str, str | None]:
    with sqlite3.connect(db) as conn:
        [(stage, dead)] = conn.execute(
            "SELECT stage, dead_letter_reason FROM tasks WHERE id = ?", (task_id,)
        ).fetchall()
    return stage, dead


def _stopped_line(log: str) -> str:
    lines = [line for line in log.splitlines() if "worker stopped" in line]
    assert len(lines) == 1, log
    return lines[0]


@pytest.mark.timeout(60)
async def test_drain_waits_for_the_retry_of_a_task_that_failed_once(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    task_id = await _seed(db, _pipeline())  # the rail's default policy: first delay 0.5-1 s
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    config = _config(tmp_path, db, [sys.executable, str(script), str(tmp_path / "marker")])

    code, log, _ = _drain(config, 45)

    assert code == 0, log
    assert _runs(db, task_id) == ["failed", "completed"], log
    assert _task(db, task_id) == ("done", None)
    assert "queue drained" in log
    stopped = _stopped_line(log)
    assert "2 claimed, 1 transitioned, 1 failed" in stopped, stopped


@pytest.mark.timeout(60)
async def test_drain_ends_once_a_failing_task_is_dead_lettered_and_says_so(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rail.db"
    # the default's 5 attempts, with delays from 100 ms (50-100, 100-200, ... 400-800 ms)
    task_id = await _seed(db, _pipeline({"retry_delay_ms": 100}))
    config = _config(tmp_path, db, ["/bin/false"])

    code, log, _ = _drain(config, 45)

    # A dead-lettered task is the task's outcome, not the worker's failure: exit 0, counted.
    assert code == 0, log
    assert _runs(db, task_id) == ["failed"] * 5, log
    assert _task(db, task_id) == ("todo", "max_attempts_exceeded")
    assert "queue drained" in log
    stopped = _stopped_line(log)
    assert re.search(r"5 claimed, 0 transitioned, 5 failed \(1 dead-lettered\)", stopped), stopped


async def test_a_run_given_back_at_shutdown_counts_as_released_not_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tracker = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        pid = await tracker.create_pipeline("flow", _pipeline())
        task_id = await tracker.create_task(TaskCreate(pipeline_id=pid, title="slow"))
        started = anyio.Event()

        async def forever(ctx: ExecutionContext) -> None:
            started.set()
            await anyio.sleep_forever()

        worker = Worker(tracker, worker_config(shutdown_grace_s=0.05), [role("coder", forever)])
        caplog.set_level(logging.INFO, logger="backlog_worker.worker")
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                await start_worker(tg, worker)
                await started.wait()
                worker.stop()
        [run] = await tracker.list_runs(task_id)
    finally:
        await tracker.aclose()
    assert run.status == "released"
    assert (worker.stats.released, worker.stats.failed, worker.stats.lost) == (1, 0, 0)
    [stopped] = [r.getMessage() for r in caplog.records if "worker stopped" in r.getMessage()]
    assert "0 failed (0 dead-lettered), 1 released, 0 lost" in stopped, stopped
