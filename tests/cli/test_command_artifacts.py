"""A command's declared artifacts outlive its run directory: a real worker process, a real rail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import Rail

WRITER = """
import json, pathlib
pathlib.Path("out").mkdir()
pathlib.Path("out/report.md").write_text("all good\\n")
pathlib.Path("outcome.json").write_text(json.dumps({"artifacts": [{"path": "out/report.md"}]}))
"""


def _run(rail: Rail, tmp_path: Path, options: str = "") -> tuple[Path, list[Path]]:
    """Run one task with a command that declares ``out/report.md``; (the runs' base, the paths
    its artifacts name)."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    runs = tmp_path / "runs"
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[worker]\nworkdir = "{runs}"\n[[roles]]\nname = "coder"\nexecutor = "command"\n'
        f"[roles.options]\nargv = {json.dumps([sys.executable, str(script)])}\n{options}"
    )
    task_id = rail.add("report")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config), "--drain",
         "--tracker", rail.url],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = rail.json("task", "show", task_id)
    assert shown["task"]["stage"] == "done"
    uris = [a["uri"] for a in shown["artifacts"]]
    assert all(u.startswith("file://") for u in uris), uris
    return runs, [Path(u.removeprefix("file://")) for u in uris]


def test_command_artifacts_are_kept_where_they_outlive_the_run(
    simple: Rail, tmp_path: Path
) -> None:
    runs, [kept] = _run(simple, tmp_path)
    assert kept.read_text() == "all good\n"  # the run's directory is gone, the artifact is not
    assert (tmp_path / "data" / "backlog-worker" / "artifacts") in kept.parents
    assert list(runs.iterdir()) == []


def test_artifacts_dir_false_leaves_them_in_the_run_directory(simple: Rail, tmp_path: Path) -> None:
    runs, [left] = _run(simple, tmp_path, "artifacts_dir = false\n")
    assert runs in left.parents and not left.exists()  # removed with the run's directory
