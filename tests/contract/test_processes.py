"""Embedded-only, real OS processes sharing one rail file: concurrent drain and crash safety."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.contract.support import all_tasks, make_pipeline, new_task
from tests.startline import reap, release_together
from tracker_client.factory import open_tracker
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
WORKERS = 4
TASKS = 2_000


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.contract._rail_proc", *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_together(procs: list[subprocess.Popen[str]]) -> list[str]:
    """Wait until every child is ready, start them at once, and return their last lines."""
    try:
        release_together(procs)  # every child has opened the rail before any starts
        last = []
        for proc in procs:
            out, err = proc.communicate(timeout=100)
            assert proc.returncode == 0, err
            last.append(out.strip().splitlines()[-1])
        return last
    finally:
        reap(procs)


def _run_drainers(db: Path, out_dir: Path) -> list[list[dict[str, object]]]:
    _run_together(
        [_spawn("drain", str(db), f"proc-{n}", str(out_dir / f"{n}.json")) for n in range(WORKERS)]
    )
    return [json.loads((out_dir / f"{n}.json").read_text()) for n in range(WORKERS)]


@pytest.mark.timeout(120)
async def test_four_processes_drain_every_task_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await make_pipeline(tracker)
        for start in range(0, TASKS, 500):
            await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(start, start + 500)])
    finally:
        await tracker.aclose()

    per_process = await anyio.to_thread.run_sync(_run_drainers, db, tmp_path)

    records = [r for recs in per_process for r in recs]
    claimed_by = Counter(r["task"] for r in records)
    assert len(claimed_by) == TASKS
    doubles = [task for task, n in claimed_by.items() if n > 1]
    assert doubles == [], f"tasks leased more than once: {doubles[:5]}"
    assert len({r["lease"] for r in records}) == len(records), "a lease id was granted twice"
    assert all(recs for recs in per_process), "a process got no work at all"

    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        tasks = await all_tasks(tracker)
        assert len(tasks) == TASKS
        assert {(t.stage, t.task_version) for t in tasks} == {("done", 2)}
        granted = {
            r["task"]: (r["run"], f"proc-{n}") for n, rs in enumerate(per_process) for r in rs
        }
        for task in tasks:
            runs = await tracker.list_runs(task.id)
            assert [r.status for r in runs] == ["completed"], task.id
            assert (runs[0].id, runs[0].agent_id) == granted[task.id]
        assert (await tracker.health()).active_leases == 0
    finally:
        await tracker.aclose()


def _kill_mid_stream(db: Path, pipeline_id: str, writes: int) -> list[str]:
    proc = _spawn("writes", str(db), pipeline_id)
    said: list[str] = []
    try:
        assert proc.stdout is not None
        while len(said) < writes:
            line = proc.stdout.readline()
            assert line, f"writer died early: {proc.stderr and proc.stderr.read()}"
            said.append(line.strip())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        said.extend(line.strip() for line in proc.stdout.read().splitlines() if line.strip())
    finally:
        reap([proc])
    assert proc.returncode == -signal.SIGKILL
    return said


async def _claim_all(tracker: Tracker, agent: str) -> list[str]:
    claimed = []
    while (lease := await tracker.claim(agent, "coder", 60_000)) is not None:
        claimed.append(lease.task.id)
        await tracker.transition(lease, "complete")
    return claimed


@pytest.mark.timeout(120)
async def test_sigkill_mid_write_leaves_a_consistent_rail(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await make_pipeline(tracker)
    finally:
        await tracker.aclose()

    said = await anyio.to_thread.run_sync(_kill_mid_stream, db, pid, 1_500)

    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    raw.close()

    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        tasks = {t.id: t for t in await all_tasks(tracker)}
        # every write the child reported as committed survived the kill
        for line in said:
            what, tid = line.split(" ", 1)
            assert tid in tasks, line
            if what == "done":
                assert tasks[tid].stage == "done", line
        leased = set()
        for task in tasks.values():
            runs = await tracker.list_runs(task.id)
            statuses = Counter(r.status for r in runs)
            assert set(statuses) <= {"completed", "failed", "running"}, (task.id, statuses)
            if task.stage == "done":
                assert task.task_version == 2
                assert statuses["completed"] == 1
                assert statuses["running"] == 0
            else:
                assert (task.stage, task.task_version) == ("todo", 1)
                assert statuses["completed"] == 0
                assert statuses["running"] <= 1
                if statuses["running"]:
                    leased.add(task.id)
        assert len(leased) <= 1, "the writer held one lease at a time"
        assert (await tracker.health()).active_leases == len(leased)
        waiting = {t.id for t in tasks.values() if t.stage == "todo"} - leased
        # everything not under a lease is claimable now, and the rail takes writes again
        assert set(await _claim_all(tracker, "checker")) == waiting
    finally:
        await tracker.aclose()

    # once the dead writer's lease has expired, its task comes back too
    later = int(time.time() * 1000) + 700_000
    tracker = await open_tracker(f"sqlite:///{db}", clock=lambda: later)
    try:
        assert set(await _claim_all(tracker, "checker")) == leased
        remaining = [t for t in await all_tasks(tracker) if t.stage != "done"]
        assert remaining == []
    finally:
        await tracker.aclose()


@pytest.mark.timeout(120)
async def test_backlog_cap_holds_across_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rail.db'}?max_backlog_depth=150"
    tracker = await open_tracker(url)
    try:
        pid = await make_pipeline(tracker)
    finally:
        await tracker.aclose()

    last = await anyio.to_thread.run_sync(
        _run_together, [_spawn("fill", url, pid) for _ in range(WORKERS)]
    )

    counts = [int(line.removeprefix("created ")) for line in last]
    assert sum(counts) == 150, counts
    tracker = await open_tracker(url)
    try:
        assert len(await all_tasks(tracker)) == 150
    finally:
        await tracker.aclose()


@pytest.mark.timeout(120)
async def test_abandoned_leases_are_reclaimed_across_processes(tmp_path: Path) -> None:
    # Every 10th task's first lease is abandoned by whichever process got it; the others must
    # take it over only after that lease expired, and finish every task exactly once.
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_tasks(
            [new_task(pid, f"t{i}" + ("!" if i % 10 == 0 else "")) for i in range(300)]
        )
    finally:
        await tracker.aclose()

    def run() -> list[list[dict[str, Any]]]:
        procs = [
            _spawn("churn", str(db), f"proc-{n}", str(tmp_path / f"{n}.json"))
            for n in range(WORKERS)
        ]
        _run_together(procs)
        return [json.loads((tmp_path / f"{n}.json").read_text()) for n in range(WORKERS)]

    records = [r for recs in await anyio.to_thread.run_sync(run) for r in recs]
    assert not [r for r in records if r.get("lost")], "a live lease was lost"
    assert len({r["lease"] for r in records}) == len(records), "a lease id was granted twice"
    assert len(records) == 300 + 30
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_task.setdefault(r["task"], []).append(r)
    for task_id, grants in by_task.items():
        grants.sort(key=lambda r: r["attempt"])
        for earlier, later in itertools.pairwise(grants):
            assert earlier["abandoned"], f"task {task_id} granted again after it was finished"
            assert later["started"] >= earlier["expires"], (
                f"task {task_id} re-granted while its lease was live"
            )

    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        tasks = await all_tasks(tracker)
        assert {(t.stage, t.task_version) for t in tasks} == {("done", 2)}
        for task in tasks:
            statuses = [r.status for r in await tracker.list_runs(task.id)]
            expected = ["stale", "completed"] if task.title.endswith("!") else ["completed"]
            assert statuses == expected, (task.title, statuses)
    finally:
        await tracker.aclose()
