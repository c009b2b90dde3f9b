"""A worker of the previous release on a rail whose pipeline was changed by ``pipeline apply``
(docs/operate/pipelines.md, "Workers and upgrades"): the versions are an additive schema change,
so the previous release opens the rail and drains the tasks the apply moved into a renamed
stage. The previous release is built from the clone's own history (tests/upgrade/previous.py).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from tests.upgrade.previous import Release
from tests.worker.daemonkit import HOLD_JOB, R_PIPELINE, clean_env, python_config, reap
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TASKS = 20

#: R_PIPELINE with its working stage renamed ``todo`` -> ``work``.
RENAMED = {
    "initial": "work",
    "states": {"work": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "work", "trigger": "complete", "to": "done"}],
}


async def _apply(url: str) -> None:
    tracker = await open_tracker(url, create=True)
    try:
        pid = (await tracker.apply_pipeline("p", R_PIPELINE)).pipeline_id
        assert pid is not None
        await tracker.create_tasks(
            [TaskCreate(pipeline_id=pid, title=f"t{n}") for n in range(TASKS)]
        )
        plan = await tracker.apply_pipeline("p", RENAMED, {"todo": "work"})
        assert (plan.version, plan.tasks_moving) == (2, {"todo": TASKS})
    finally:
        await tracker.aclose()


def test_the_previous_release_drains_a_changed_pipeline(
    previous: Release,
    tmp_path: Path,
) -> None:
    db = tmp_path / "rail.db"
    url = f"sqlite:///{db}"
    anyio.run(_apply, url)
    (tmp_path / "drainjob.py").write_text(HOLD_JOB)
    config = python_config(tmp_path, url, "drainjob:run", "drain = true", concurrency=4)
    env = clean_env(PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    log = tmp_path / "old.log"
    with log.open("wb") as stderr:
        old = subprocess.Popen(
            [*previous.cli(), "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
    try:
        assert old.wait(240) == 0, log.read_text()[-3000:]
    finally:
        reap(old)
    with closing(sqlite3.connect(db)) as conn:
        stages = conn.execute("SELECT stage, count(*) FROM tasks GROUP BY stage").fetchall()
    assert stages == [("done", TASKS)]
