"""A real worker holds a task claimed under version 1 while ``pipeline apply`` renames the stage
its run leads to (with moves): the run finishes under version 1 and the task lands in version 2.

Real parts: a ``backlog-worker run`` process with a command executor on a real SQLite rail, the
``pipeline apply`` CLI in its own process while the run is in flight.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from tests.pipelines.defs import renamed, sent, v1
from tests.pipelines.test_cli import _toml, cli
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.timeout(120)

#: Says it started (a file), then runs until the test lets it finish (another file).
HOLD = """
import pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text("started")
deadline = time.monotonic() + 60
while not pathlib.Path(sys.argv[2]).exists() and time.monotonic() < deadline:
    time.sleep(0.02)
"""


def _config(tmp_path: Path, db: Path, argv: list[str]) -> Path:
    path = tmp_path / "worker.toml"
    quoted = ", ".join(json.dumps(a) for a in argv)
    path.write_text(
        f"""
[tracker]
url = "sqlite:///{db}"

[worker]
concurrency = 1
max_tasks = 1
report_flush_s = 0.1

[[roles]]
name = "writer"
executor = "command"
[roles.options]
argv = [{quoted}]
"""
    )
    return path


async def _seed(url: str) -> tuple[str, str]:
    """Version 1 with a task waiting in ``review`` and one in ``draft`` (for the worker)."""
    tracker = await open_tracker(url)
    try:
        pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
        assert pid is not None
        waiting = await tracker.create_task(TaskCreate(pipeline_id=pid, title="waiting"))
        lease = await tracker.claim("seed", "writer", 60_000)
        assert lease is not None and lease.task_id == waiting
        await tracker.transition(lease, "submit")
        held = await tracker.create_task(TaskCreate(pipeline_id=pid, title="held"))
        return waiting, held
    finally:
        await tracker.aclose()


def _row(db: Path, task_id: str) -> tuple[str, int | None]:
    with sqlite3.connect(db) as conn:
        [(stage, version)] = conn.execute(
            "SELECT stage, pipeline_version FROM tasks WHERE id = ?", (task_id,)
        ).fetchall()
    return stage, version


def _wait_for(path: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"the run did not start: {log.read_text()}"
        time.sleep(0.02)  # polling a real condition (the executor's file) under a deadline


def test_a_held_task_finishes_under_version_1_and_lands_in_version_2(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    url = f"sqlite:///{db}"
    waiting, held = anyio.run(_seed, url)
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    started, go = tmp_path / "started", tmp_path / "go"
    config = _config(tmp_path, db, [sys.executable, str(script), str(started), str(go)])
    log = tmp_path / "worker.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )
    try:
        _wait_for(started, proc, log)
        assert _row(db, held) == ("draft", 1)  # claimed under version 1

        moves = '{ review = "check" }'
        path = tmp_path / "v2.toml"
        path.write_text(_toml(renamed(), moves=moves))
        applied = cli("pipeline", "apply", "-f", str(path), "--tracker", url, "--json")
        assert applied.returncode == 0, applied.stderr
        plan = json.loads(applied.stdout)
        assert (plan["version"], plan["tasks_running"], plan["tasks_moving"]) == (
            2,
            1,
            {"review": 1},
        )
        assert _row(db, waiting) == ("check", 2)  # moved in the apply's transaction
        assert _row(db, held) == ("draft", 1)  # still running under version 1

        go.write_text("go")
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # submit (version 1: draft -> review), then through the move into version 2's check
    assert _row(db, held) == ("check", 2), log.read_text()
    with sqlite3.connect(db) as conn:
        [(data,)] = conn.execute(
            "SELECT data FROM events WHERE task_id = ? AND kind = 'transition'", (held,)
        ).fetchall()
    assert json.loads(data)["from"] == "draft" and json.loads(data)["to"] == "check"
    assert "Traceback" not in log.read_text()


#: The second run says it started and waits for the test's file; the others end at once.
COUNT_AND_HOLD = """
import pathlib, sys, time
count = pathlib.Path(sys.argv[1])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
if n == 2:
    pathlib.Path(sys.argv[2]).write_text("started")
    deadline = time.monotonic() + 60
    while not pathlib.Path(sys.argv[3]).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
"""


async def _apply_and_add(url: str, definition: dict[str, object]) -> str:
    tracker = await open_tracker(url)
    try:
        pid = (await tracker.apply_pipeline("review", definition)).pipeline_id
        assert pid is not None
        return await tracker.create_task(TaskCreate(pipeline_id=pid, title="after"))
    finally:
        await tracker.aclose()


def test_a_worker_with_an_older_definition_sends_the_newer_trigger(tmp_path: Path) -> None:
    """The worker caches version 1 (its first run sends ``submit``); ``pipeline apply`` renames
    that trigger ``send``; a task made after it is refused ``submit`` by the rail, and the
    worker reads the pipeline again and sends ``send``, with no failed run."""
    db = tmp_path / "rail.db"
    url = f"sqlite:///{db}"
    first, held = anyio.run(_seed_two, url)
    script = tmp_path / "count.py"
    script.write_text(COUNT_AND_HOLD)
    count, started, go = tmp_path / "count", tmp_path / "started", tmp_path / "go"
    argv = [sys.executable, str(script), str(count), str(started), str(go)]
    config = _config(tmp_path, db, argv)
    config.write_text(config.read_text().replace("max_tasks = 1", "max_tasks = 3"))
    log = tmp_path / "worker.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )
    try:
        _wait_for(started, proc, log)  # the first run ended with version 1's trigger
        after = anyio.run(_apply_and_add, url, sent())
        go.write_text("go")
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    for task_id in (first, held, after):
        assert _row(db, task_id)[0] == "review", log.read_text()
    with sqlite3.connect(db) as conn:
        triggers = [
            json.loads(data)["trigger"]
            for (data,) in conn.execute(
                "SELECT data FROM events WHERE task_id = ? AND kind = 'transition'", (after,)
            )
        ]
        failed = conn.execute("SELECT count(*) FROM runs WHERE status = 'failed'").fetchone()[0]
    assert triggers == ["send"], log.read_text()
    assert failed == 0, log.read_text()
    assert "Traceback" not in log.read_text()


async def _seed_two(url: str) -> tuple[str, str]:
    """Version 1 with two tasks in ``draft``: the worker's first run and its held second."""
    return await _apply_and_add(url, v1()), await _apply_and_add(url, v1())
