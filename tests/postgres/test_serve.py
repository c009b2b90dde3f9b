"""``backlog-worker tracker serve --tracker postgresql://...``: NullTickets-API clients on a
PostgreSQL rail (a real server process on 127.0.0.1, a real HTTP client, stopped by pid)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from tests.contract.support import make_pipeline, new_task
from tests.postgres.server import PgServer, fresh_schema_url
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(
    base: str, proc: subprocess.Popen[bytes], deadline_s: float = 60
) -> dict[str, object]:
    deadline = time.monotonic() + deadline_s
    while True:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"tracker serve exited ({proc.returncode}): {out[-2000:]}")
        try:
            answer = httpx.get(f"{base}/health", timeout=2)
            if answer.status_code == 200:
                return dict(answer.json())
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "tracker serve did not answer in time"
        time.sleep(0.05)


async def test_tracker_serve_shares_a_postgresql_rail(pg_server: PgServer) -> None:
    url = fresh_schema_url(f"serve-{uuid.uuid4()}")
    secret_url = url.replace("backlog@", "backlog:pw-not-shown@")
    port = _free_port()
    argv = [sys.executable, "-m", "worker", "tracker", "serve", "--tracker", secret_url]
    argv += ["--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        health = _wait_healthy(base, proc)
        assert health["version"] == "backlog-worker-postgres/1"
        remote = await open_tracker(base)
        try:
            pid = await make_pipeline(remote)
            tid = await remote.create_task(new_task(pid))
            lease = await remote.claim("agent", "coder", 60_000)
            assert lease is not None and lease.task.id == tid
            await remote.add_event(lease, "log", {"line": "over http"})
            await remote.transition(lease, "complete")
        finally:
            await remote.aclose()
        local = await open_tracker(url)  # the same rail, straight through PostgreSQL
        try:
            assert (await local.get_task(tid)).stage == "done"
        finally:
            await local.aclose()
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    # A clean shutdown on SIGTERM (the server dies by the signal it was sent, after it).
    assert proc.returncode in (0, -signal.SIGTERM), out.decode()[-2000:]
    assert b"Finished server process" in out
    assert b"pw-not-shown" not in out
