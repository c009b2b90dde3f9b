"""The front ends on a PostgreSQL rail, as real processes: ``pipeline create``, ``task add``,
``submit --wait`` while ``run`` works (the waiter on another connection woken by NOTIFY),
``run --drain``, ``task show`` and ``queue``."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.postgres.server import PgServer, fresh_schema_url
from tests.worker.daemonkit import PIPELINE_TOML, clean_env, write_config

pytestmark = pytest.mark.timeout(180)

CLI = (sys.executable, "-m", "worker")
#: Succeeds (the stage's only way out), so each task finishes.
SCRIPT = "import sys; sys.stdin.read(); sys.exit(0)"


def _cli(url: str, *args: str) -> str:
    done = subprocess.run(
        [*CLI, *args, "--tracker", url, "--json"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_cli_and_a_worker_drain_a_postgresql_rail(pg_server: PgServer, tmp_path: Path) -> None:
    url = fresh_schema_url(f"frontends-{uuid.uuid4()}")
    flow = tmp_path / "flow.toml"
    flow.write_text(PIPELINE_TOML)
    _cli(url, "pipeline", "create", "-f", str(flow))
    added = json.loads(_cli(url, "task", "add", "-p", "flow", "first"))
    task_id = str(added["id"] if "id" in added else added["ids"][0])

    cfg = write_config(tmp_path, url, token=None, argv=[sys.executable, "-c", SCRIPT])
    cfg.write_text(cfg.read_text() + 'stdin = "task_json"\n')
    worker = subprocess.Popen(
        [*CLI, "run", "--config", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        waited = subprocess.run(
            [*CLI, "submit", "-p", "flow", "second", "--wait", "--timeout", "60s"],
            capture_output=True,
            text=True,
            env={**clean_env(), "BACKLOG_WORKER_TRACKER__URL": url},
            timeout=90,
            check=False,
        )
        assert waited.returncode == 0, waited.stdout + waited.stderr[-2000:]
        assert "done" in waited.stdout
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=60)
    assert worker.returncode in (0, -15), err[-2000:]

    shown = json.loads(_cli(url, "task", "show", task_id))
    assert (shown.get("task") or shown)["stage"] == "done"
    queue = json.loads(_cli(url, "queue"))
    assert "coder" in json.dumps(queue)
