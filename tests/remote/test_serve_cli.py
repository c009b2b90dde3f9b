"""``backlog-worker tracker serve`` as a real process on 127.0.0.1, and its bad inputs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.remote.fake_nulltickets import PIPELINE
from tests.remote.fixtures import wait_listening
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import TrackerRejected
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker
from worker.cli import main

TOKEN = "file-token-0123456789"


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_serve_process_with_a_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    # The rail exists first, as after `pipeline create` (serve does not create one).
    await (await EmbeddedTracker.open(str(tmp_path / "rail.db"))).aclose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "worker",
                "tracker",
                "serve",
                "--tracker",
                f"sqlite://{tmp_path / 'rail.db'}",
                "--port",
                "0",
                "--token-file",
                str(token_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    try:
        url = wait_listening(log, proc)
        tracker = RemoteTracker(url, api_token=TOKEN)
        try:
            pid = await tracker.create_pipeline("p", PIPELINE)
            await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
            lease = await tracker.claim("w", "coder", 60_000)
            assert lease is not None
            await tracker.transition(lease, "complete")
            assert (await tracker.wait(lease.task.id, timeout_s=5)).outcome == "done"
            assert tracker.max_lease_ttl_ms is None  # the served tracker keeps the lease's TTL
        finally:
            await tracker.aclose()
        anonymous = RemoteTracker(url)
        try:
            with pytest.raises(TrackerRejected) as info:
                await anonymous.list_pipelines()
            assert info.value.code == "unauthorized"
        finally:
            await anonymous.aclose()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    text = log.read_text()
    assert TOKEN not in text
    assert "api auth: admin token required" in text


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tracker", "http://127.0.0.1:7700"], "give sqlite:///path.db"),
        (["--tracker", "sqlite:///x.db", "--token", "a", "--token-file", "t"], "not both"),
        (["--tracker", "sqlite:///x.db", "--token-file", "/nonexistent/token"], "--token-file"),
        (["--tracker", "sqlite:///x.db", "--token", "  "], "empty"),
    ],
)
def test_bad_serve_options_exit_2_naming_the_problem(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(main, ["tracker", "serve", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output
