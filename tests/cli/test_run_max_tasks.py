"""``backlog-worker run --max-tasks N`` on a real rail: exactly N tasks, however work arrives."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.conftest import Rail

JOB = "def work(ctx):\n    return None\n"


def _worker(rail: Rail, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "maxjobs.py").write_text(JOB)
    config = tmp_path / "worker.toml"
    config.write_text(
        "[worker]\nconcurrency = 4\nidle_min_s = 0.01\nidle_max_s = 0.05\n"
        '[[roles]]\nname = "coder"\nexecutor = "python"\n'
        'options = { callable = "maxjobs:work" }\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = str(tmp_path)
    return subprocess.Popen(
        [sys.executable, "-m", "worker", "run", "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _stages(rail: Rail) -> dict[str, str]:
    return {t["title"]: t["stage"] for t in rail.json("task", "list", "--all")["items"]}


def _wait_done(rail: Rail, proc: subprocess.Popen[str], title: str) -> None:
    deadline = time.monotonic() + 30
    while _stages(rail).get(title) != "done":  # poll with a deadline: no sleep
        assert proc.poll() is None, f"worker exited early: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{title} never ran"


def test_max_tasks_runs_exactly_n_when_work_trickles_in(simple: Rail, tmp_path: Path) -> None:
    # An empty queue first: the worker's claims (one per free slot) come back empty. It used to
    # count them against the budget and stop at once, having run nothing.
    proc = _worker(simple, tmp_path, "--max-tasks", "3", "--tracker", simple.url)
    try:
        for title in ("one", "two"):  # one at a time, each run before the next arrives
            simple.add(title)
            _wait_done(simple, proc, title)
        simple.add("three")
        simple.add("four")  # two waiting, one left in the budget
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == 0, err
    assert "worker stopped: 3 claimed, 3 transitioned" in err
    stages = _stages(simple)
    assert sorted(stages.values()) == ["done", "done", "done", "todo"], stages
