"""``tracker serve`` as a real process: starting a new rail on request, stopping promptly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

from tests.remote.fixtures import serve_on_port, wait_listening
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import create_app

_SERVE = [sys.executable, "-m", "worker", "tracker", "serve"]


def _serve(tmp_path: Path, db: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*_SERVE, "--tracker", f"sqlite://{db}", "--port", "0", *extra],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    return proc, log


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_serve_create_starts_a_new_rail_with_mode_0600(tmp_path: Path) -> None:
    db = tmp_path / "new" / "rail.db"
    db.parent.mkdir()
    proc, log = _serve(tmp_path, db, "--create")
    try:
        wait_listening(log, proc)
        assert db.exists()
        assert db.stat().st_mode & 0o777 == 0o600
    finally:
        _stop(proc)


@pytest.mark.timeout(60)
def test_serve_without_create_refuses_a_missing_rail_and_names_the_flag(tmp_path: Path) -> None:
    db = tmp_path / "missing.db"
    proc, log = _serve(tmp_path, db)
    try:
        assert proc.wait(timeout=30) == 2
    finally:
        _stop(proc)
    text = log.read_text()
    assert f"error: no rail at {db}" in text
    assert "--create" in text
    assert not db.exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_sigterm_answers_open_long_polls_and_exits_promptly(tmp_path: Path) -> None:
    """An idle worker's wait-for-work long poll (up to 25 s) must not hold up a stop."""
    db = tmp_path / "rail.db"
    proc, log = _serve(tmp_path, db, "--create")
    try:
        url = wait_listening(log, proc)
        host, port = url.removeprefix("http://").split(":")
        polls = []
        for _ in range(2):
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(
                b"GET /ops/wait-for-work?timeout_ms=60000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            )
            polls.append(sock)
        # a request served after the polls were sent proves they reached the server
        with socket.create_connection((host, int(port)), timeout=30) as probe:
            probe.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert probe.recv(64).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        took = time.monotonic() - started
        for sock in polls:
            answer = sock.recv(4096)
            sock.close()
            assert answer.startswith(b"HTTP/1.1 200"), answer
        print(f"stop with 2 open long polls took {took:.2f}s")
        # uvicorn re-raises the signal once it stopped cleanly (systemd counts it as clean)
        assert rc in (0, -signal.SIGTERM), log.read_text()
        assert took < 5, f"stop took {took:.1f}s with long polls open"
    finally:
        _stop(proc)


@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_a_long_poll_whose_client_left_is_dropped(tmp_path: Path) -> None:
    """A drained worker closes its client with a wait-for-work poll still open: the server
    drops that poll at once instead of keeping it (and any stop) alive for its timeout. Plain
    uvicorn here, without the serve command's closing signal."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        app = create_app(tracker)
        async with serve_on_port(app) as url:
            host, port = url.removeprefix("http://").split(":")
            stream = await anyio.connect_tcp(host, int(port))
            await stream.send(
                b"GET /ops/wait-for-work?timeout_ms=60000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            )
            async with httpx.AsyncClient() as client:  # served after the poll: it is in flight
                assert (await client.get(f"{url}/health")).status_code == 200
            await stream.aclose()
            started = anyio.current_time()
        took = anyio.current_time() - started  # the server's stop waits for requests in flight
        print(f"stop after an abandoned long poll took {took:.2f}s")
        assert took < 5
    finally:
        await tracker.aclose()
