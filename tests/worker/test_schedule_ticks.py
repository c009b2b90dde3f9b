"""Schedule ticks driven by workers: real processes on one embedded file, and restarts.

Three ``python -m worker run`` processes declare the same ``[[schedules]]`` (a 1-second cron)
and run their maintenance loops for about ten seconds on one rail (an embedded file, and a real
``tracker serve`` on 127.0.0.1): every tick between the first and the last made exactly one task
(none twice, none missing). The restart tests use the fake
clock: a rail reopened after hours of downtime applies the schedule's missed-tick policy, and a
worker restarting with the same declaration neither skips nor repeats a tick, nor lifts a pause.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.contract.support import FakeClock
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import ConfigError
from tracker_client.schedule_models import Schedule
from worker.cli.ops.schedule import declare_schedules
from worker.config.models import ScheduleConfig, load_config

pytestmark = pytest.mark.anyio

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
HOUR_MS = 3_600_000


def _config(tmp_path: Path, url: str, token: str | None = None) -> Path:
    path = tmp_path / "worker.toml"
    auth = f'api_token = "{token}"' if token else ""
    path.write_text(
        f"""
[tracker]
url = "{url}"
{auth}

[worker]
concurrency = 2
idle_min_s = 0.01
idle_max_s = 0.2
maintenance_interval_s = 0.2

[[roles]]
name = "coder"
executor = "command"
[roles.options]
argv = ["/bin/true"]

[[schedules]]
name = "every-second"
pipeline = "flow"
cron = "* * * * * *"
title = "tick"
metadata = {{ source = "test" }}
"""
    )
    return path


def _spawn(config: Path, n: int) -> subprocess.Popen[bytes]:
    log = config.with_name(f"worker-{n}.log")
    with log.open("wb") as fh:  # a file: a pipe nobody reads would fill up
        return subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config), "--agent-id", f"w{n}"],
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )


def _ticks(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT metadata FROM tasks WHERE title = 'tick'").fetchall()
    return [int(json.loads(r[0])["scheduled_at_ms"]) for r in rows]


def _wait_for(predicate: object, timeout: float) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def _three_workers_for_ten_ticks(config: Path, db: Path) -> None:
    """Three worker processes on ``config`` until the rail ``db`` has ten ticks' tasks; then
    every tick between the first and the last has exactly one task."""
    procs = [_spawn(config, n) for n in range(3)]
    try:
        _wait_for(lambda: len(_ticks(db)) >= 10, 60)  # about ten seconds of ticks
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(30) for proc in procs]
    logs = "\n".join(p.read_text() for p in sorted(config.parent.glob("worker-*.log")))
    assert codes == [0, 0, 0], logs
    ticks = sorted(_ticks(db))
    assert len(ticks) == len(set(ticks)), "a tick made two tasks"
    assert ticks == list(range(ticks[0], ticks[-1] + 1, 1000)), "a tick made no task"
    with sqlite3.connect(db) as conn:
        ((created,),) = conn.execute("SELECT tasks_created FROM schedules").fetchall()
        metadata = json.loads(conn.execute("SELECT metadata FROM tasks LIMIT 1").fetchone()[0])
    assert created == len(ticks)
    assert metadata["schedule"] == "every-second" and metadata["source"] == "test"


@pytest.mark.timeout(120)
async def test_three_worker_processes_make_one_task_per_one_second_tick(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    async with await EmbeddedTracker.open(str(db)) as tracker:
        await tracker.create_pipeline("flow", PIPELINE)
    _three_workers_for_ten_ticks(_config(tmp_path, f"sqlite:///{db}"), db)


@pytest.mark.timeout(120)
def test_three_workers_on_a_served_rail_make_one_task_per_tick(tmp_path: Path) -> None:
    from tests.worker.daemonkit import TOKEN, serve_tracker

    with serve_tracker(tmp_path) as (url, db):  # a real `tracker serve` on 127.0.0.1
        _three_workers_for_ten_ticks(_config(tmp_path, url, TOKEN), db)


@pytest.mark.parametrize(("policy", "made"), [("skip", 0), ("catch_up", 1)])
async def test_a_rail_reopened_after_downtime_applies_the_policy(
    tmp_path: Path, policy: str, made: int
) -> None:
    clock, path = FakeClock(), str(tmp_path / "rail.db")
    async with await EmbeddedTracker.open(path, clock=clock) as tracker:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        first = (
            await tracker.create_schedule(
                schedule="hourly",
                pipeline_id=pid,
                cron="0 * * * *",
                title="t",
                missed=policy,
            )
        ).next_tick_ms
        clock.now_ms = first + 1_000
        assert (await tracker.maintenance()).scheduled_tasks == 1
    clock.now_ms = first + 3 * HOUR_MS + 20 * 60_000  # down for three ticks
    async with await EmbeddedTracker.open(path, clock=clock) as tracker:
        assert (await tracker.maintenance()).scheduled_tasks == made
        again = await tracker.get_schedule("hourly")
        assert again.next_tick_ms == first + 4 * HOUR_MS  # the next future tick
        tasks = (await tracker.list_tasks(pipeline_id=pid)).items
        if policy == "catch_up":
            assert tasks[-1].metadata["missed_ticks"] == 3
            assert tasks[-1].metadata["scheduled_at_ms"] == first + HOUR_MS
        clock.now_ms = first + 4 * HOUR_MS
        assert (await tracker.maintenance()).scheduled_tasks == 1  # then on schedule


async def test_a_restarting_worker_keeps_the_tick_and_the_pause(tmp_path: Path) -> None:
    clock = FakeClock()
    declared = [ScheduleConfig(name="nightly", pipeline="flow", cron="0 3 * * *", title="n")]
    async with await EmbeddedTracker.open(str(tmp_path / "rail.db"), clock=clock) as tracker:
        await tracker.create_pipeline("flow", PIPELINE)
        await declare_schedules(tracker, declared)
        first: Schedule = await tracker.get_schedule("nightly")
        await tracker.pause_schedule("nightly")
        clock.advance(60_000)
        await declare_schedules(tracker, declared)  # the same worker, restarted
        kept = await tracker.get_schedule("nightly")
        assert kept.paused and kept.next_tick_ms == first.next_tick_ms
        changed = [declared[0].model_copy(update={"title": "renamed"})]
        await declare_schedules(tracker, changed)
        assert (await tracker.get_schedule("nightly")).title == "renamed"
        missing = [declared[0].model_copy(update={"pipeline": "nope"})]
        with pytest.raises(ConfigError, match=r"\[\[schedules\]\] #1 \(nightly\).*nope"):
            await declare_schedules(tracker, missing)
        assert len(await tracker.list_schedules()) == 1


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('cron = "0 3 * *"', "cron"),
        ('timezone = "Mars/Olympus"', "timezone"),
        ('missed = "sometimes"', "missed"),
    ],
)
def test_a_bad_declared_schedule_is_refused_at_load_naming_the_key(
    tmp_path: Path, line: str, says: str
) -> None:
    path = tmp_path / "w.toml"
    table = {"name": '"n"', "pipeline": '"flow"', "cron": '"0 3 * * *"', "title": '"t"'}
    key = line.split(" = ")[0]
    table[key] = line.split(" = ", 1)[1]
    body = "\n".join(f"{k} = {v}" for k, v in table.items())
    path.write_text(f'[[roles]]\nname = "coder"\nexecutor = "command"\n\n[[schedules]]\n{body}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "schedules" in str(info.value) and says in str(info.value), str(info.value)
