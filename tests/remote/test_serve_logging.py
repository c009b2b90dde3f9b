"""``tracker serve``'s log and HTTP parser choices, as a real process on 127.0.0.1.

By default the served rail writes no line per claim, finish or creation (``--log-tasks`` or
``--log-level DEBUG`` brings them back), while a cancel (an operator's act) is still logged.
``--http`` picks uvicorn's parser: httptools by default where installed, h11 where it is not;
asking for httptools without it exits 2 naming it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.remote.fake_nulltickets import PIPELINE
from tests.remote.fixtures import wait_listening
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker

#: Runs the CLI with httptools unimportable (``sys.modules[name] = None`` makes import fail).
WITHOUT_HTTPTOOLS = (
    "import sys; sys.modules['httptools'] = None; "
    "from worker.cli import main; main(sys.argv[1:], prog_name='backlog-worker')"
)


@contextmanager
def serving(tmp_path: Path, *args: str, code: str | None = None) -> Iterator[tuple[str, Path]]:
    """A real ``tracker serve --create`` on a fresh rail file: its URL and its log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    log = tmp_path / "serve.log"
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "worker"]
    rail = f"sqlite://{tmp_path / 'rail.db'}"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*command, "tracker", "serve", "--tracker", rail, "--port", "0", "--create", *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    try:
        yield wait_listening(log, proc), log
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


async def _claim_finish_and_cancel(url: str) -> None:
    tracker = RemoteTracker(url)
    try:
        pid = await tracker.create_pipeline("p", PIPELINE)
        first = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t1"))
        second = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t2"))
        lease = await tracker.claim("w", "coder", 60_000)
        assert lease is not None and lease.task.id == first
        await tracker.transition(lease, "complete")
        await tracker.cancel(second)
    finally:
        await tracker.aclose()


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.anyio
@pytest.mark.parametrize("args", [(), ("--log-tasks",), ("--log-level", "DEBUG")])
async def test_per_task_lines_only_when_asked_and_a_cancel_always(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    with serving(tmp_path, *args) as (url, log):
        await _claim_finish_and_cancel(url)
    text = log.read_text()
    assert "; http: httptools)" in text  # the default, where installed
    assert "action=task_cancelled" in text, text[-3000:]
    per_task = ("action=task_claimed", "action=task_finished", "action=task_created")
    if args:
        assert all(action in text for action in per_task), text[-3000:]
    else:
        assert not any(action in text for action in per_task), text[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_without_httptools_the_default_parser_is_h11(tmp_path: Path) -> None:
    with serving(tmp_path, code=WITHOUT_HTTPTOOLS) as (url, log):
        await _claim_finish_and_cancel(url)
    assert "; http: h11)" in log.read_text()


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.anyio
@pytest.mark.parametrize("http", ["h11", "httptools"])
async def test_the_parser_asked_for_serves_and_is_announced(tmp_path: Path, http: str) -> None:
    with serving(tmp_path, "--http", http) as (url, log):
        await _claim_finish_and_cancel(url)
    assert f"; http: {http})" in log.read_text()


@pytest.mark.timeout(60)
def test_asking_for_httptools_without_it_exits_2_naming_it(tmp_path: Path) -> None:
    rail = f"sqlite://{tmp_path / 'rail.db'}"
    args = ["tracker", "serve", "--tracker", rail, "--create", "--http", "httptools"]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_HTTPTOOLS, *args],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "--http httptools: httptools is not installed" in done.stderr
    assert not (tmp_path / "rail.db").exists()  # refused before the rail was made


@pytest.mark.timeout(60)
def test_an_unknown_parser_exits_2_naming_the_choices(tmp_path: Path) -> None:
    rail = f"sqlite://{tmp_path / 'rail.db'}"
    args = ["tracker", "serve", "--tracker", rail, "--create", "--http", "picohttp"]
    done = subprocess.run(
        [sys.executable, "-m", "worker", *args],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "'picohttp' is not one of 'h11', 'httptools'" in done.stderr
    assert not (tmp_path / "rail.db").exists()
