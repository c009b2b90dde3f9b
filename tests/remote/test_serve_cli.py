"""``backlog-worker tracker serve`` as a real process on 127.0.0.1, and its bad inputs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from tests.remote.fake_nulltickets import PIPELINE
from tracker_client.errors import TrackerRejected
from tracker_client.models import TaskCreate
from tracker_client.remote import RemoteTracker
from worker.cli import main

TOKEN = "file-token-0123456789"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError("server did not become healthy in time")


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_serve_process_with_a_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
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
            str(port),
            "--token-file",
            str(token_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
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
        _, stderr = proc.communicate(timeout=20)
    assert TOKEN not in stderr.decode()
    assert "api auth: admin token required" in stderr.decode()


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
