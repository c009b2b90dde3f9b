"""A worker's INFO log tells a task's life in one line per claim and one per finish: a real
``backlog-worker run --drain --log-format json`` on a real SQLite rail (whose embedded tracker
used to log every claim and every transition a second time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.worker.daemonkit import add_task, clean_env, cli, make_rail, write_config

#: Fails the tasks whose title says so; the others finish (the stage's only way out).
SCRIPT = "import json, sys; sys.exit(1 if 'fail' in json.load(sys.stdin)['task']['title'] else 0)"


def _drain(tmp_path: Path, db: Path) -> list[dict[str, Any]]:
    cfg = write_config(tmp_path, f"sqlite://{db}", token=None, argv=[sys.executable, "-c", SCRIPT])
    cfg.write_text(cfg.read_text() + 'stdin = "task_json"\n')
    argv = [sys.executable, "-m", "worker", "run", "--config", str(cfg), "--drain"]
    done = subprocess.run(
        [*argv, "--log-format", "json", "--log-level", "INFO"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]


def _life(records: list[dict[str, Any]], task_id: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("task_id") == task_id]


@pytest.mark.timeout(90)
def test_one_line_per_claim_and_per_finish(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    ok = add_task(db, "works")
    records = _drain(tmp_path, db)
    life = _life(records, ok)
    assert [r["action"] for r in life] == ["run_start", "run_transitioned"], life
    claimed, finished = life
    assert claimed["attempt"] == 1 and claimed["stage"] == "todo"
    assert "claimed" in claimed["message"]
    assert finished["outcome"] == "transitioned"
    assert finished["trigger"] == "complete"
    assert isinstance(finished["duration_s"], float) and finished["duration_s"] >= 0
    assert "todo -> done" in finished["message"] and "took" in finished["message"]


@pytest.mark.timeout(90)
def test_a_retried_then_dead_lettered_task_has_one_finish_line_per_run(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    doc = json.loads(
        cli(db, "task", "add", "-p", "flow", "fail me", "--max-attempts", "2", "--retry-delay", "0")
    )
    task_id = str(doc["id"])
    records = _drain(tmp_path, db)
    life = _life(records, task_id)
    actions = [r["action"] for r in life]
    assert actions == ["run_start", "run_failed", "run_start", "run_failed"], life
    first, last = life[1], life[3]
    assert first["outcome"] == "retry_scheduled" and last["outcome"] == "dead_lettered"
    assert [life[0]["attempt"], life[2]["attempt"]] == [1, 2]
    assert all(isinstance(r["duration_s"], float) for r in (first, last))
