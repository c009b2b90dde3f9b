"""HUP reload stores the config's changed ``[[schedules]]`` in the rail, as a start does.

A real ``backlog-worker run`` process on an embedded rail: a reload with an edited cron and a new
schedule stores both (read back through the CLI, another process); a reload naming an unknown
pipeline is refused in the log, naming the table, before anything is written, while the worker
keeps running and keeps its running set; the next good reload stores it and names the schedule
that left the config (it stays in the rail: removing one is ``schedule remove``).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.worker.daemonkit import cli, make_rail, reap, spawn_worker, wait_for, write_config


def _schedule(name: str, cron: str, pipeline: str = "flow") -> str:
    return (
        f'\n[[schedules]]\nname = "{name}"\npipeline = "{pipeline}"\ncron = "{cron}"\n'
        f'title = "{name} tick"\n'
    )


def _stored(db: Path) -> dict[str, str]:
    listed: Any = json.loads(cli(db, "schedule", "list"))
    items = listed["schedules"] if isinstance(listed, dict) else listed
    return {item["name"]: item["cron"] for item in items}


@pytest.mark.timeout(120)
def test_hup_stores_changed_schedules_and_refuses_a_bad_one_naming_it(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    config = write_config(tmp_path, f"sqlite://{db}", token=None, argv=["/bin/true"])
    base = config.read_text()
    config.write_text(base + _schedule("nightly", "0 3 * * *"))
    log = tmp_path / "worker.log"
    proc = spawn_worker(config, log)
    try:
        wait_for(lambda: _stored(db) == {"nightly": "0 3 * * *"}, 30, "the declared schedule")

        config.write_text(
            base + _schedule("nightly", "0 4 * * *") + _schedule("hourly", "0 * * * *")
        )
        proc.send_signal(signal.SIGHUP)
        want = {"nightly": "0 4 * * *", "hourly": "0 * * * *"}
        wait_for(lambda: _stored(db) == want, 30, "the reloaded schedules in the rail")

        config.write_text(
            base + _schedule("nightly", "0 5 * * *") + _schedule("broken", "0 1 * * *", "nope")
        )
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "[[schedules]] not stored" in log.read_text(), 30, "the refusal")
        assert "[[schedules]] #2 (broken)" in log.read_text(), log.read_text()
        assert proc.poll() is None, log.read_text()  # still running, on its running set
        assert _stored(db) == want  # nothing of that reload was written

        config.write_text(base + _schedule("nightly", "0 6 * * *"))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: _stored(db)["nightly"] == "0 6 * * *", 30, "the next good reload")
        wait_for(
            lambda: "schedule hourly is no longer in the config" in log.read_text(),
            30,
            "the schedule that left the config, named",
        )
        assert _stored(db) == {"nightly": "0 6 * * *", "hourly": "0 * * * *"}  # it stays
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        reap(proc)
