"""A backup taken while two real workers drain 2,000 tasks, restored, verified and drained to the
end: no task is lost (docs/operate/backups-retention.md).

Everything is real: the rail file, two ``backlog-worker run`` processes sharing it, the
``rail backup|restore|verify`` commands as separate processes, SIGTERM to stop the workers. The
restore goes back to the backup's moment, so the tasks finished after it run again; what the
backup held as running comes back as expired leases and is reclaimed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from tests.worker.daemonkit import (
    HOLD_JOB,
    R_PIPELINE,
    clean_env,
    python_config,
    reap,
    spawn_worker,
    wait_for,
)
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TASKS = 2000


async def _seed(db: Path) -> None:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("p", R_PIPELINE)
        for start in range(0, TASKS, 500):
            await tracker.create_tasks(
                [TaskCreate(pipeline_id=pid, title=f"t{n}") for n in range(start, start + 500)]
            )
    finally:
        await tracker.aclose()


def _done(db: Path) -> int:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        (n,) = conn.execute("SELECT count(*) FROM tasks WHERE stage = 'done'").fetchone()
    return int(n)


def _cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", "rail", *args, "--tracker", f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )


def test_a_backup_taken_mid_drain_restores_and_drains_to_the_end(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    anyio.run(_seed, db)
    (tmp_path / "drainjob.py").write_text(HOLD_JOB)
    env = clean_env(PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    config = python_config(tmp_path, f"sqlite:///{db}", "drainjob:run", concurrency=4)
    workers = [spawn_worker(config, tmp_path / f"w{i}.log", env=env) for i in range(2)]
    try:
        wait_for(lambda: _done(db) >= TASKS // 4, 120, "a quarter of the tasks done")
        (tmp_path / "hold").touch()
        backup = _cli(db, "backup", str(tmp_path / "mid.db"))
        assert backup.returncode == 0, backup.stderr
        at_backup = _done(db)
        (tmp_path / "hold").unlink()
        wait_for(lambda: _done(db) > at_backup, 60, "the workers going on after the backup")
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            assert proc.wait(60) == 0, (tmp_path / "w0.log").read_text()[-2000:]
    finally:
        for proc in workers:
            reap(proc)
    held = _done(tmp_path / "mid.db")
    assert 0 < held < TASKS
    with closing(sqlite3.connect(tmp_path / "mid.db")) as conn:
        (leased,) = conn.execute("SELECT count(*) FROM tasks WHERE lease_expires_at_ms > 0")
    assert leased[0] > 0  # the backup holds running tasks: their leases come back expired

    restore = _cli(db, "restore", str(tmp_path / "mid.db"))
    assert restore.returncode == 0, restore.stderr
    assert _done(db) == held  # the rail as of the backup's moment
    verify = _cli(db, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr

    drain = python_config(
        tmp_path, f"sqlite:///{db}", "drainjob:run", "drain = true", concurrency=4
    )
    finishers = [spawn_worker(drain, tmp_path / f"d{i}.log", env=env) for i in range(2)]
    try:
        for proc in finishers:
            assert proc.wait(240) == 0, (tmp_path / "d0.log").read_text()[-2000:]
    finally:
        for proc in finishers:
            reap(proc)
    assert _done(db) == TASKS  # every task, none lost
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        (dead,) = conn.execute(
            "SELECT count(*) FROM tasks WHERE dead_letter_reason IS NOT NULL"
        ).fetchone()
    assert dead == 0
    final = _cli(db, "verify")
    assert final.returncode == 0, final.stdout
