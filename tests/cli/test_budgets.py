"""Budgets for agent loops end to end (docs/operate/budgets.md): a real worker process runs a
reviewer that always rejects; the rail stops the loop at its budget and ``task show`` says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import Rail
from tests.docs.blocks import find

PAGE = "docs/operate/budgets.md"
#: work (coder) -> review (reviewer) -> done, max_loops 3: the page's pipeline.
LOOP = json.loads(find(PAGE, lang="json", after="## Setting them").body)
#: A worker that always submits and a reviewer that always rejects: the page's jobs.
JOBS = find(PAGE, lang="python", after="## Reporting cost from an executor").body

CONFIG = """
[worker]
idle_min_s = 0.01
idle_max_s = 0.05
[[roles]]
name = "coder"
executor = "python"
options = { callable = "loopjobs:work" }
[[roles]]
name = "reviewer"
executor = "python"
options = { callable = "loopjobs:review" }
"""


def _drain(rail: Rail, tmp_path: Path) -> str:
    """``backlog-worker run --drain`` as a process until nothing is left; its stderr."""
    (tmp_path / "loopjobs.py").write_text(JOBS)
    config = tmp_path / "worker.toml"
    config.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKLOG_WORKER_", "PYTHON"))}
    env["PYTHONPATH"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config), "--drain",
         "--tracker", rail.url],
        capture_output=True, text=True, env=env, timeout=60, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_reviewer_that_always_rejects_stops_at_the_loop_budget(
    rail: Rail, tmp_path: Path
) -> None:
    rail.pipeline("loop", LOOP)
    task_id = rail.add("write the essay", pipeline="loop")

    _drain(rail, tmp_path)

    shown = rail.cli("task", "show", task_id)
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "dead-lettered (budget_exceeded: loops 3 of 3 in stage work;" in out
    assert "loops 3 of 3 in stage work" in out  # the figures, in the state and the event
    assert "work 3, review 3 (cap 3 per stage)" in out
    assert "8 (no cap)" in out  # runs
    assert "0.12 USD (no cap)" in out  # 4 x 0.01 + 4 x 0.02
    assert "6000 (no cap)" in out  # 4 x 1000 + 4 x 500 tokens
    detail = rail.json("task", "show", task_id)
    task = detail["task"]
    assert task["dead_letter_reason"] == "budget_exceeded"
    assert task["budget"]["exceeded"] == "loops 3 of 3 in stage work"
    assert task["budget"]["runs"] == 8

    queue = rail.cli("queue")
    assert queue.exit_code == 0, queue.output
    assert "stopped by a budget: reviewer 1" in queue.stdout


def test_submit_takes_budgets_over_the_pipelines(rail: Rail, tmp_path: Path) -> None:
    rail.pipeline("loop", LOOP)
    shown = rail.cli(
        "submit", "-p", "loop", "quick one", "--budget", "max_loops=1", "--budget", "max_cost=0.5"
    )
    assert shown.exit_code == 0, shown.output
    task_id = rail.json("task", "list", "--all")["items"][0]["id"]

    _drain(rail, tmp_path)

    detail = rail.json("task", "show", task_id)
    task = detail["task"]
    assert task["budgets"] == {"max_loops": 1, "max_cost": 0.5}
    assert task["budget"]["exceeded"] == "loops 1 of 1 in stage work"


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        ("max_loops=-1", "budgets.max_loops must be a whole number >= 0"),
        ("max_cost=cheap", "budgets.max_cost must be a number >= 0 (USD) or null (no cap), "
         "got the string 'cheap'"),
        ("max_loop=3", "unknown budget 'max_loop' (did you mean 'max_loops'?)"),
        ("max_runs", "--budget 'max_runs': expected KEY=VALUE"),
    ],
)  # fmt: skip
def test_a_bad_budget_flag_is_refused_naming_it(rail: Rail, flag: str, words: str) -> None:
    rail.pipeline("loop", LOOP)
    shown = rail.cli("submit", "-p", "loop", "never", "--budget", flag)
    assert shown.exit_code != 0
    assert words in shown.stderr
    assert rail.json("task", "list", "--all")["items"] == []
