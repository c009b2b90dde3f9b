"""The collector's tuning is the ``run`` command's process's, never an embedded ``Worker``'s.

The collector's thresholds and frozen objects are the whole process's, so each test runs a real
worker in a subprocess on a real SQLite rail, and a python job reports what the collector looks
like from inside a run (its thresholds and :func:`gc.get_freeze_count`), then the process at exit:

* a ``Worker`` embedded in a program (``Worker.run`` called by the program) leaves the collector
  exactly as the program set it, during the runs and after;
* ``backlog-worker run --drain`` tunes it while the worker runs (youngest generation at
  ``BUSY_GC_GEN0``, start-up's heap frozen), restores it when it stops and freezes the heap for
  the interpreter's exit; with ``[worker] gc_tuning = false`` or
  ``BACKLOG_WORKER_WORKER__GC_TUNING=false`` it leaves it alone, at exit too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.worker.daemonkit import python_config
from worker.cli.gc_tuning import BUSY_GC_GEN0

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]

# What the collector looks like: before the worker, from inside each run, and at exit.
_PROBE = """
import atexit, gc, json
import plugins.api
state = {"before": [list(gc.get_threshold()), gc.get_freeze_count()], "during": []}
async def job(ctx):
    state["during"].append([list(gc.get_threshold()), gc.get_freeze_count()])
    return plugins.api.Transition()
def report():
    state["after"] = [list(gc.get_threshold()), gc.get_freeze_count()]
    print(json.dumps(state))
atexit.register(report)
"""

# The real `backlog-worker run`, in process, its python role calling the probe's job.
_RUN = """
import sys
sys.modules["probe_job"] = type(sys)("probe_job")
sys.modules["probe_job"].run = job
sys.argv = ["backlog-worker", "run", "--config", sys.argv[1], "--drain"]
from worker.cli import main
main()
"""

# An application embedding a Worker: its own executor, its own call of Worker.run.
_EMBEDDED = """
import sys
import anyio
from tracker_client.factory import open_tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

class Job:
    async def execute(self, ctx):
        return await job(ctx)

async def main(url):
    tracker = await open_tracker(url)
    try:
        config = WorkerConfig(agent_id="app", concurrency=2, drain=True, idle_min_s=0.05,
                              idle_max_s=0.2, report_flush_s=0.05)
        role = Role(config=RoleConfig(name="r", executor="app"), executor=Job())
        worker = Worker(tracker, config, [role])
        await worker.run()
        assert worker.error is None, worker.error
    finally:
        await tracker.aclose()

anyio.run(main, sys.argv[1])
"""

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}

_SEED = """
import sys, anyio, json
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
async def seed(url):
    tracker = await open_tracker(url)
    try:
        pid = await tracker.create_pipeline("p", json.loads(sys.argv[2]))
        await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(3)])
    finally:
        await tracker.aclose()
anyio.run(seed, sys.argv[1])
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _python(script: str, *argv: str, cwd: Path, **env: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *argv],
        capture_output=True,
        text=True,
        env=_env(**env),
        cwd=cwd,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    report: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    return report


def _rail(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'rail.db'}"
    _python(_SEED, url, json.dumps(PIPELINE), cwd=tmp_path)
    return url


def test_an_embedded_worker_leaves_the_hosts_collector_as_it_was(tmp_path: Path) -> None:
    """``Worker.run`` in an application changes neither the thresholds nor the frozen heap."""
    state = _python(_PROBE + _EMBEDDED, _rail(tmp_path), cwd=tmp_path)
    assert len(state["during"]) == 3  # the worker really ran every task
    assert state["before"][1] == 0
    assert state["during"] == [state["before"]] * 3
    assert state["after"] == state["before"]


def test_the_run_command_tunes_the_collector_while_it_runs(tmp_path: Path) -> None:
    """By default ``run`` freezes start-up's heap and raises gen 0 while it runs, gives the
    thresholds back when the worker stops, and exits with the heap frozen."""
    config = python_config(tmp_path, _rail(tmp_path), "probe_job:run")
    state = _python(_PROBE + _RUN, str(config), cwd=tmp_path)
    (threshold, frozen) = state["before"]
    assert frozen == 0
    assert len(state["during"]) == 3
    for during_threshold, during_frozen in state["during"]:
        assert during_threshold == [BUSY_GC_GEN0, *threshold[1:]]
        assert during_frozen > 0  # start-up's heap, set aside from the collector
    (after_threshold, after_frozen) = state["after"]
    assert after_threshold == threshold  # Python's own thresholds back once the worker stopped
    # and, as the process exits, the heap set aside again: the interpreter's shutdown does not
    # walk it (freeze_for_exit); exit handlers such as this report still run
    assert after_frozen > 0


@pytest.mark.parametrize(
    ("worker_lines", "env"),
    [
        (["gc_tuning = false"], {}),
        ([], {"BACKLOG_WORKER_WORKER__GC_TUNING": "false"}),
    ],
    ids=["config-key", "environment"],
)
def test_the_off_switch_leaves_the_run_commands_collector_alone(
    tmp_path: Path, worker_lines: list[str], env: dict[str, str]
) -> None:
    """``[worker] gc_tuning = false`` (or its variable): Python's own settings throughout."""
    config = python_config(tmp_path, _rail(tmp_path), "probe_job:run", *worker_lines)
    state = _python(_PROBE + _RUN, str(config), cwd=tmp_path, **env)
    assert len(state["during"]) == 3
    assert state["during"] == [state["before"]] * 3
    assert state["after"] == state["before"]


def test_a_bad_gc_tuning_value_is_refused_naming_the_key(tmp_path: Path) -> None:
    """A value that is no boolean is a configuration error (exit 2) naming the key."""
    config = python_config(tmp_path, _rail(tmp_path), "probe_job:run", 'gc_tuning = "sometimes"')
    proc = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config), "--drain"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "gc_tuning" in proc.stderr
