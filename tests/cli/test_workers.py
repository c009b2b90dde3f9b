"""``backlog-worker workers [--state S] [--json]`` on a real embedded rail file and a served one.

Workers are registered through the tracker (as :mod:`worker.daemon.presence` does); the table
shows each with its busy/total slots, state, last seen and task ids, alive first; ``--json`` is
the list of :class:`~tracker_client.observe_models.WorkerInfo`. An unknown ``--state`` is a
usage error naming the flag, and the file is left byte for byte as it was.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Rail, invoke, served_in_thread
from tracker_client.models import TaskCreate
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.timeout(60)


def _body(agent_id: str, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "host": "box",
        "pid": 101,
        "version": "0.1.0",
        "roles": ["coder", "checker"],
        "slots": 2,
        "agent_id": agent_id,
        "started_at_ms": int(time.time() * 1000),
        "lost_after_ms": 600_000,
    }
    body.update(over)
    return body


def _seed(simple: Rail) -> str:
    """Three workers (one running a task, one lost, one stopped); the running task's id."""

    async def seed(tracker: Tracker) -> str:
        (pipeline,) = await tracker.list_pipelines()
        task_id = await tracker.create_task(TaskCreate(pipeline_id=pipeline.id, title="job"))
        await tracker.call("register_worker", "busy-1", **_body("agent-busy"))
        lease = await tracker.claim("agent-busy", "coder", 600_000)
        assert lease is not None
        await tracker.call("register_worker", "gone-2", **_body("agent-gone", pid=202))
        await tracker.call("register_worker", "bye-3", **_body("agent-bye", pid=303, stopping=True))
        return task_id

    task_id = simple.run(seed)
    # "gone-2" falls silent: its row is aged by hand (the rail's clock is the wall clock here).
    with sqlite3.connect(simple.path) as conn:
        conn.execute(
            "UPDATE workers SET last_seen_at_ms = last_seen_at_ms - 700000 WHERE id = 'gone-2'"
        )
    return task_id


def test_table_json_and_state_filter(simple: Rail) -> None:
    task_id = _seed(simple)
    result = simple.cli("workers")
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    rows = {cells[0]: cells for cells in lines if cells[0] in ("busy-1", "gone-2", "bye-3")}
    assert list(rows) == ["busy-1", "gone-2", "bye-3"]  # alive, lost, stopped
    assert rows["busy-1"][1:6] == ["box", "101", "coder,", "checker", "1/2"]
    assert rows["busy-1"][6] == "alive" and rows["busy-1"][-1] == task_id
    assert rows["gone-2"][6] == "lost" and "11m" in " ".join(rows["gone-2"])
    assert rows["bye-3"][6] == "stopped" and rows["bye-3"][-1] == "-"
    assert "3 worker(s): 1 alive, 1 lost, 1 stopped" in result.stdout

    listed = simple.json("workers")
    assert [(w["id"], w["state"]) for w in listed] == [
        ("busy-1", "alive"),
        ("gone-2", "lost"),
        ("bye-3", "stopped"),
    ]
    (run,) = listed[0]["running"]
    assert (run["task_id"], run["role"]) == (task_id, "coder")
    assert set(listed[0]) >= {"host", "pid", "version", "roles", "slots", "last_seen_at_ms"}
    assert [w["id"] for w in simple.json("workers", "--state", "lost")] == ["gone-2"]


def test_no_workers(simple: Rail) -> None:
    result = simple.cli("workers")
    assert result.exit_code == 0 and "no workers registered" in result.stdout
    assert simple.json("workers") == []
    stopped = simple.cli("workers", "--state", "stopped")
    assert stopped.exit_code == 0 and "no stopped workers" in stopped.stdout


@pytest.mark.parametrize("flags", [("--state", "zombie"), ("--state", ""), ("--frobnicate",)])
def test_bad_input_is_a_usage_error_and_writes_nothing(
    simple: Rail, flags: tuple[str, ...]
) -> None:
    _seed(simple)
    before = simple.path.read_bytes()
    result = simple.cli("workers", *flags)
    assert result.exit_code == 2, result.output
    assert flags[0] in result.stderr, result.stderr
    assert simple.path.read_bytes() == before


def test_missing_rail_file_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    result = invoke(["workers", "--tracker", f"sqlite:///{missing}"])
    assert result.exit_code != 0 and "nowhere.db" in result.stderr
    assert not missing.exists()


def test_workers_on_a_served_rail(simple: Rail) -> None:
    task_id = _seed(simple)
    with served_in_thread(simple.path) as url:
        listed = invoke(["workers", "--tracker", url, "--json"])
        assert listed.exit_code == 0, listed.output
        table = invoke(["workers", "--tracker", url])
    assert table.exit_code == 0 and "busy-1" in table.stdout and task_id in table.stdout
    assert '"gone-2"' in listed.stdout and '"lost"' in listed.stdout
