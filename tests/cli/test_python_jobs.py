"""Python jobs through the real CLI: a real worker process runs them on a real rail file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import anyio

from tests.cli.conftest import Rail
from tests.docs.blocks import find
from tracker_client.producer import connect


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


JOBS_PAGE = "docs/executors/python-jobs.md"
PRODUCER_PAGE = "docs/submit/producer.md"


def test_a_returned_dict_reaches_wait_submit_wait_and_dependents(
    simple: Rail, tmp_path: Path
) -> None:
    """The Celery habit (docs/executors/python-jobs.md): `return {...}` is the task's result."""
    job = find(JOBS_PAGE, lang="python", after="## Results as values").body
    (tmp_path / "celeryish.py").write_text(job)
    config = _config(tmp_path / "w.toml", "celeryish:summarise")
    data_home = tmp_path / "data"
    env = {**_clean_env(), "PYTHONPATH": str(tmp_path), "XDG_DATA_HOME": str(data_home)}
    env.pop("STATE_DIRECTORY", None)
    worker = subprocess.Popen(
        [sys.executable, "-m", "worker", "run", "--config", str(config), "--tracker", simple.url],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd="/",
    )  # fmt: skip
    try:
        shown = simple.cli(
            "submit", "-p", "simple", "summarise it", "--wait", "--timeout", "30s"
        )  # fmt: skip
        assert shown.exit_code == 0, shown.output
        assert 'result: {"summary":"summarise it","words":2}' in shown.stdout

        helper: dict[str, Any] = {}
        exec(find(PRODUCER_PAGE, lang="python", after="## Results").body, helper)
        result_of = helper["result_of"]

        async def produce() -> str:
            async with connect(simple.url) as rail:
                first = await rail.submit("simple", "first of two")
                big = await rail.submit("simple", "big one", metadata={"big": True})
                combined = await rail.submit(
                    "simple", "combine", metadata={"combine": True}, depends_on=[first, big]
                )
                done = await rail.wait(first, timeout=30)
                assert done.outcome == "done" and done.result_event is not None
                assert done.result_event.data == {"summary": "first of two", "words": 3}

                done = await rail.wait(big, timeout=30)
                assert done.outcome == "done" and done.result_event is not None
                pointer = done.result_event.data
                (artifact,) = done.artifacts
                assert (artifact.kind, artifact.id) == ("result", pointer["artifact_id"])
                path = Path(urlparse(pointer["uri"]).path)
                assert path.is_relative_to(data_home / "backlog-worker" / "artifacts")
                assert path.name == "result.json"
                assert json.loads(path.read_bytes()) == {"rows": ["x" * 1000] * 100}
                assert pointer["size_bytes"] == path.stat().st_size == artifact.size_bytes

                # the page's helper answers the value either way
                assert await result_of(rail, first) == {"summary": "first of two", "words": 3}
                assert await result_of(rail, big) == {"rows": ["x" * 1000] * 100}

                done = await rail.wait(combined, timeout=30)
                assert done.outcome == "done" and done.result_event is not None
                assert done.result_event.data == {
                    "combined": [{"summary": "first of two", "words": 3}, pointer]
                }
                return first

        first = anyio.run(produce)
        timeline = simple.cli("task", "show", first)
        assert timeline.exit_code == 0, timeline.output
        assert "summary=first of two words=3" in timeline.stdout  # the result event
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr


def test_a_returned_non_json_value_is_refused_naming_its_type(simple: Rail, tmp_path: Path) -> None:
    (tmp_path / "setish.py").write_text('def tags(ctx):\n    return {"tags": {"a", "b"}}\n')
    task_id = simple.add("tag it")
    _run(simple, _config(tmp_path / "w.toml", "setish:tags"), env={"PYTHONPATH": str(tmp_path)})
    shown = simple.json("task", "show", task_id)["task"]
    assert shown["dead_letter_reason"] == "permanent_failure"  # not retried: it would fail again
    assert shown["latest_run"]["error"] == (
        "bad_executor_output: setish:tags returned a result that is not JSON: "
        "the result['tags'] is a set, not a JSON value"
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
