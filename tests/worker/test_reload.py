"""HUP reload: concurrency and role limits apply to new claims; restart-only keys are named.

A real ``backlog-worker run`` process whose executors write a start marker and wait for a
release file, so "three tasks run at once" is observed through markers, not timing.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from tests.worker.daemonkit import (
    add_task,
    cli,
    make_rail,
    reap,
    spawn_worker,
    wait_for,
    write_config,
)


@pytest.mark.timeout(90)
def test_hup_raises_concurrency_and_names_a_changed_tracker_url(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    go = tmp_path / "go"
    script = f"touch {marks}/$1; while [ ! -e {go} ]; do sleep 0.02; done"
    argv = ["sh", "-c", script, "sh", "{run.id}"]
    url = f"sqlite://{db}"
    config = write_config(tmp_path, url, token=None, argv=argv, concurrency=1, lease_ttl_s=10)
    tasks = [add_task(db, f"t{i}") for i in range(3)]
    log = tmp_path / "worker.log"
    proc = spawn_worker(config, log)
    try:
        wait_for(lambda: len(list(marks.iterdir())) == 1, 30, "the first run to start")
        text = config.read_text().replace("concurrency = 1", "concurrency = 3")
        other = f"sqlite://{tmp_path / 'elsewhere.db'}"
        config.write_text(text.replace(f'url = "{url}"', f'url = "{other}"'))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: len(list(marks.iterdir())) == 3, 30, "three runs at once after HUP")
        assert not go.exists()  # none of them could have finished: all three ran together
        logged = log.read_text()
        assert re.search(r"tracker\.url changed but needs a restart", logged), logged
        assert "3 slots" in logged
        go.touch()

        def all_done() -> bool:
            return all(
                json.loads(cli(db, "task", "show", t))["task"]["stage"] == "done" for t in tasks
            )

        wait_for(all_done, 30, "the three tasks to finish on the old tracker")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        reap(proc)
