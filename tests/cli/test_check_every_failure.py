"""``backlog-worker check`` reports every failure in one pass: a role whose executor cannot be
built is one failed check, and the tracker, the token and the other roles are still checked.

A python role whose module is not on the import path says where to put it (``[worker]
python_path``, relative to the config file); one whose module imports something missing does
not (that is an install away, the path is right). Every check runs as a real process started
from ``/``, as a unit would start it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.conftest import Rail

HINT = "list its directory in [worker] python_path (relative to the worker config's directory)"


def _check(config: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKLOG_WORKER_", "PYTHON"))}
    return subprocess.run(
        [sys.executable, "-m", "worker", "check", "--config", str(config), *flags],
        capture_output=True, text=True, timeout=50, cwd="/", env=env, check=False,
    )  # fmt: skip


def _config(path: Path, url: str, callable_: str) -> Path:
    """A python role ``coder`` (``callable_``) and a command role ``checker`` that is ready."""
    path.write_text(
        f'[tracker]\nurl = "{url}"\n\n'
        f'[[roles]]\nname = "coder"\nexecutor = "python"\n'
        f'options = {{ callable = "{callable_}" }}\n\n'
        f'[[roles]]\nname = "checker"\nexecutor = "command"\n'
        f'options = {{ argv = [{json.dumps(sys.executable)}, "-c", "pass"] }}\n'
    )
    return path


def test_an_unimportable_module_fails_its_role_and_the_rest_is_still_checked(
    simple: Rail, tmp_path: Path
) -> None:
    config = _config(tmp_path / "worker.toml", simple.url, "review_jobs:summarise")
    done = _check(config)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert failed == [
        "FAIL executor: role coder: executor 'python': python option 'callable' "
        "'review_jobs:summarise': cannot import module 'review_jobs': ModuleNotFoundError: No "
        f"module named 'review_jobs'; if it is a file of yours, {HINT}, or install it as a package"
    ], done.stdout
    assert f"ok   tracker {simple.url} answered (version " in done.stdout, done.stdout
    assert "ok   rail read (1 pipeline(s))" in done.stdout, done.stdout
    assert "ok   role checker: executor command ready" in lines, done.stdout

    as_json: dict[str, Any] = json.loads(_check(config, "--json").stdout)
    verdicts = {(c["name"], c["level"]) for c in as_json["checks"]}
    assert as_json["ok"] is False
    assert {("executors", "fail"), ("tracker", "ok"), ("role:checker", "ok")} <= verdicts


def test_a_missing_rail_is_refused_after_the_executors_are_checked(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    config = _config(tmp_path / "worker.toml", f"sqlite://{missing}", "review_jobs:summarise")
    done = _check(config)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FAIL executor: role coder: " in done.stdout
    assert "ok   role checker: executor command ready" in done.stdout
    assert f"error: no rail at {missing}" in done.stderr


def test_a_dependency_missing_inside_the_module_gets_no_python_path_hint(
    simple: Rail, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "review_jobs.py").write_text("import not_installed_anywhere\n")
    config = _config(tmp_path / "worker.toml", simple.url, "review_jobs:summarise")
    config.write_text('[worker]\npython_path = ["jobs"]\n\n' + config.read_text())
    done = _check(config)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "cannot import module 'review_jobs': ModuleNotFoundError: No module named "
        "'not_installed_anywhere'\n" in done.stdout
    ), done.stdout
    assert "python_path" not in done.stdout
    assert f"ok   tracker {simple.url} answered" in done.stdout
