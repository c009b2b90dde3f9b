"""Python jobs through the real CLI: a real worker process runs them on a real rail file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import Rail


def _clean_env() -> dict[str, str]:
    """The suite's environment without worker settings and without PYTHONPATH & co."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("BACKLOG_WORKER_", "PYTHON"))}


def _run(rail: Rail, config: Path, *, env: dict[str, str] | None = None) -> str:
    """``backlog-worker run --drain`` as a process; its stderr (checked: exit 0)."""
    base = _clean_env()
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config), "--drain",
         "--tracker", rail.url],
        capture_output=True, text=True, env={**base, **(env or {})}, timeout=60, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def _config(path: Path, callable_: str, extra: str = "") -> Path:
    path.write_text(
        f'{extra}[[roles]]\nname = "coder"\nexecutor = "python"\n'
        f'options = {{ callable = "{callable_}" }}\n'
    )
    return path


def test_a_returned_result_dict_says_how_results_are_reported(simple: Rail, tmp_path: Path) -> None:
    (tmp_path / "celeryish.py").write_text('def summarise(ctx):\n    return {"summary": "ok"}\n')
    task_id = simple.add("summarise it")
    _run(
        simple,
        _config(tmp_path / "w.toml", "celeryish:summarise"),
        env={"PYTHONPATH": str(tmp_path)},
    )
    error = simple.json("task", "show", task_id)["task"]["latest_run"]["error"]
    assert error.startswith(
        "bad_executor_output: celeryish:summarise returned a dict with unknown key(s) 'summary', "
        "which is not an outcome and is not stored: report a result with "
        'ctx.report("result", {...}, flush=True)'
    ), error
    assert "ctx.artifact_file(path, copy_to=...)" in error
    assert (
        "then return None (the stage's way out or the role's default trigger), "
        'Transition("trigger")' in error
    )


def test_python_path_imports_jobs_without_pythonpath(simple: Rail, tmp_path: Path) -> None:
    jobs = tmp_path / "deploy" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "summaries.py").write_text("def summarise(ctx):\n    return None\n")
    # relative to the config file, not to where the worker starts (cwd "/", as a unit's)
    config = _config(
        tmp_path / "deploy" / "w.toml", "summaries:summarise", '[worker]\npython_path = ["jobs"]\n'
    )
    task_id = simple.add("summarise it")
    _run(simple, config)
    assert simple.json("task", "show", task_id)["task"]["stage"] == "done"

    plugins = subprocess.run(
        [sys.executable, "-m", "worker", "plugins", "--config", str(config), "--json"],
        capture_output=True, text=True, timeout=60, cwd="/",
        env=_clean_env(),
    )  # fmt: skip
    assert plugins.returncode == 0, plugins.stdout + plugins.stderr
    assert '"state": "ready"' in plugins.stdout


def test_a_python_path_that_is_no_directory_is_named(simple: Rail, tmp_path: Path) -> None:
    config = _config(
        tmp_path / "w.toml", "summaries:summarise", '[worker]\npython_path = ["jbos"]\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "worker", "check", "--config", str(config), "--tracker", simple.url],
        capture_output=True, text=True, timeout=60, cwd="/", env=_clean_env(),
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"worker.python_path (in {config}): {tmp_path / 'jbos'} is not a directory" in (
        result.stderr
    )
