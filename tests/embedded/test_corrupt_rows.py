"""One bad stored row fails that task, not the rail.

The row is corrupted directly with sqlite3 (as a disk fault, a bad migration or a hand edit
would). Before, ``backlog-worker run`` exited 1 with a traceback on the first claim that met it
and no other task ran; ``task list`` failed too.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.factory import open_tracker
from tracker_client.models import CORRUPT_MARKER, TaskCreate
from tracker_client.serve.app import create_app

pytestmark = pytest.mark.anyio

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


#: Stored metadata no reader can use, and what the marker says of it: text that does not parse,
#: and JSON nested 300 deep (restored or hand-edited; no write stores it), which parses but
#: which no answer's encoder can carry (pydantic stops at ~255 levels).
BAD = {
    "invalid": ('{"repo": ', "not valid JSON"),
    "too-deep": ("[" * 300 + "]" * 300, "nested deeper than 64 levels"),
}


async def _rail(db: Path, bad: str = '{"repo": ') -> list[str]:
    """Five tasks; the middle one (highest priority: claimed first) gets corrupt metadata."""
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        ids = await tracker.create_tasks(
            [
                TaskCreate(pipeline_id=pid, title=f"t{i}", priority=9 if i == 2 else 0)
                for i in range(5)
            ]
        )
    finally:
        await tracker.aclose()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE tasks SET metadata = ? WHERE id = ?", (bad, ids[2]))
    conn.close()
    return ids


def _cli(*args: str, db: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args, "--tracker", f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
        env={**os.environ, "COLUMNS": "200"},  # table rows on one line each
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("bad", sorted(BAD))
async def test_run_drain_dead_letters_the_corrupt_task_and_drains_the_rest(
    tmp_path: Path, bad: str
) -> None:
    db = tmp_path / "rail.db"
    text, says = BAD[bad]
    ids = await _rail(db, text)
    config = tmp_path / "worker.toml"
    config.write_text(
        f"""
[tracker]
url = "sqlite:///{db}"

[worker]
idle_min_s = 0.01
idle_max_s = 0.1

[[roles]]
name = "coder"
executor = "command"
[roles.options]
argv = ["/bin/true"]
"""
    )
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config), "--drain"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    with sqlite3.connect(db) as conn:
        rows = dict(
            conn.execute("SELECT id, stage || '/' || ifnull(dead_letter_reason, '') FROM tasks")
        )
    conn.close()
    assert rows.pop(ids[2]) == "todo/corrupt_row"
    assert set(rows.values()) == {"done/"}
    with sqlite3.connect(db) as conn:  # refused once, never run
        runs = conn.execute("SELECT count(*) FROM runs WHERE task_id = ?", (ids[2],)).fetchone()
        refused = conn.execute(
            "SELECT count(*) FROM events WHERE task_id = ? AND kind = 'corrupt_row'", (ids[2],)
        ).fetchone()
    conn.close()
    assert (runs[0], refused[0]) == (0, 1)

    # the bad task is listed, marked; the others are listed as usual
    listed = _cli("task", "list", "--json", db=db, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    items = {t["id"]: t for t in json.loads(listed.stdout)["items"]}
    assert set(items) == set(ids)
    assert says in json.dumps(items[ids[2]]["metadata"])
    table = _cli("task", "list", db=db, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "corrupt" in table.stdout
    shown = _cli("task", "show", ids[2], db=db, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "corrupt_row" in shown.stdout


async def test_reads_of_every_json_column_survive_corruption(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        lease = await tracker.claim("a", "coder", 60_000)
        assert lease is not None
        await tracker.add_event(lease, "progress", {"i": 1})
        await tracker.fail(lease, "x", usage={"tokens": 1})
        await tracker.store_put("ns", "k", {"v": 1})
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE runs SET usage = '{oops'")
            conn.execute("UPDATE events SET data = '[1,'")
            conn.execute("UPDATE store SET value = 'nope'")
        conn.close()
        (run,) = await tracker.list_runs(tid)
        assert "not valid JSON" in json.dumps(run.usage)
        events = (await tracker.list_events(run.id)).items
        assert events and all("not valid JSON" in json.dumps(e.data) for e in events)
        assert "not valid JSON" in json.dumps((await tracker.store_get("ns", "k")).value)
        assert (await tracker.get_task(tid)).latest_run is not None
    finally:
        await tracker.aclose()


async def test_task_list_marks_a_corrupt_task_before_any_claim(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    ids = await _rail(db)
    table = _cli("task", "list", db=db, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    marked = [line for line in table.stdout.splitlines() if "corrupt metadata" in line]
    assert len(marked) == 1
    assert ids[2] in marked[0]
    assert sum(i in table.stdout for i in ids) == 5


@pytest.mark.parametrize("bad", sorted(BAD))
async def test_served_reads_show_the_marker_of_a_corrupt_row(tmp_path: Path, bad: str) -> None:
    db = tmp_path / "rail.db"
    text, says = BAD[bad]
    ids = await _rail(db, text)
    tracker = await EmbeddedTracker.open(str(db))
    try:
        async with (
            serve_on_port(create_app(tracker)) as url,
            httpx.AsyncClient(base_url=url) as client,
        ):
            listed = await client.get("/tasks", params={"limit": 10})
            one = await client.get(f"/tasks/{ids[2]}")
            other = await client.get(f"/tasks/{ids[0]}")
    finally:
        await tracker.aclose()
    assert (listed.status_code, one.status_code, other.status_code) == (200, 200, 200)
    marked = {t["id"]: t["metadata"] for t in listed.json()["items"]}
    assert set(marked) == set(ids)
    assert says in marked[ids[2]][CORRUPT_MARKER]
    assert says in one.json()["metadata"][CORRUPT_MARKER]
    assert other.json()["metadata"] == {}


@pytest.mark.parametrize(
    "text",
    [
        '{"i":1}',
        '{"a":[1,{"b":null}],"c":"\\u00e9"}',
        "[]",
        "123",
        '"text"',
        ' {"i":1}',
        '{"i":1} ',
        '{"i":1}x',
        '{"i":1}{"j":2}',
        "",
        "nul",
        "[1,2",
        "NaN",
        "\ufeff{}",
        '{"repo": ',
    ],
)
def test_a_stored_value_is_read_as_json_loads_reads_it(text: str) -> None:
    """The claim's reader of stored JSON takes a compact value straight from the json module's
    scanner: every text answers what ``json.loads`` answers, or fails as it fails."""
    from tracker_client.rules.common import _parse

    try:
        expected: object = ("value", json.loads(text))
    except ValueError as exc:
        expected = ("error", type(exc), str(exc))
    try:
        got: object = ("value", _parse(text))
    except ValueError as exc:
        got = ("error", type(exc), str(exc))
    assert repr(got) == repr(expected)  # repr: NaN is not equal to itself
