"""examples/agents/ end to end, the way its comments tell a user to run it: real processes
(``pipeline create``, ``task add``, ``run --drain`` with the example on ``PYTHONPATH``, ``task
show``) on a fresh embedded rail. The planner spawns three subtasks, waits for them, and
summarises their results, with the store as shared memory.

The ``task show`` timeline is printed (``pytest -s`` shows it) and checked: three dependencies,
all done; the planner's run, then the summariser's, which started only after every subtask's
run had ended; each subtask names the planner as its parent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "agents"

pytestmark = pytest.mark.timeout(180)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = str(EXAMPLE)  # what the comments say: PYTHONPATH=examples/agents
    env["BACKLOG_WORKER_WORKER__WORKDIR"] = str(tmp_path / "runs")
    env["COLUMNS"] = "200"
    return env


def _run(tmp_path: Path, *args: str) -> str:
    """``backlog-worker ARGS --config <the example's config, on tmp_path's rail>``; stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "worker", *args, "--config", str(tmp_path / "worker.toml")],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def _json(tmp_path: Path, *args: str) -> Any:
    return json.loads(_run(tmp_path, *args, "--json"))


def test_agents_example_fans_out_and_in_with_the_store_as_memory(tmp_path: Path) -> None:
    # the example's config as is, its rail file (relative) landing in tmp_path (the cwd)
    config = (EXAMPLE / "worker.toml").read_text()
    assert 'url = "sqlite:///./agents-rail.db"' in config
    (tmp_path / "worker.toml").write_text(config)
    for name in ("planner", "research"):
        _run(tmp_path, "pipeline", "create", "-f", str(EXAMPLE / f"{name}.toml"))
    added = _json(tmp_path, "task", "add", "-p", "planner", "Tides of Brittany")
    parent = added.get("id") or added["ids"][0]
    _run(tmp_path, "run", "--drain")

    timeline = _run(tmp_path, "task", "show", parent)
    print(f"\n$ backlog-worker task show {parent}\n{timeline}")
    shown = _json(tmp_path, "task", "show", parent)
    task = shown["task"]
    assert task["stage"] == "done"
    deps = [d["depends_on_task_id"] for d in task["dependencies"]]
    assert len(deps) == 3 and all(d["resolved"] for d in task["dependencies"])
    assert timeline.count("(done)") >= 3 and all(d in timeline for d in deps)
    roles = [r["agent_role"] for r in sorted(shown["runs"], key=lambda r: r["started_at_ms"])]
    assert roles == ["planner", "summariser"]
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds == ["planned", "transition", "result", "transition"]
    (planned,) = [e["data"] for e in shown["events"] if e["kind"] == "planned"]
    assert sorted(planned["subtasks"]) == sorted(deps)

    # each subtask: a child of the planner, done, its result read by the summariser
    ended = 0
    for child in deps:
        detail = _json(tmp_path, "task", "show", child)
        assert detail["task"]["parent_id"] == parent
        assert detail["task"]["stage"] == "done"
        ended = max(ended, *(r["ended_at_ms"] for r in detail["runs"]))
    summariser = next(r for r in shown["runs"] if r["agent_role"] == "summariser")
    assert summariser["started_at_ms"] >= ended  # fan-in: only after every subtask ended
    (summary,) = [e["data"] for e in shown["events"] if e["kind"] == "result"]
    assert summary["angles"] == ["history", "physics", "travel"]
    assert summary["findings_in_memory"] == 3
    assert summary["summary"].count("finding on Tides of Brittany") == 3
