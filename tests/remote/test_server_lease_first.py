"""Lease routes check the lease before they read a body (issue 10, item 15).

A request to a lease route with a wrong token or an unknown run used to have its whole body
(up to 16 MiB) read and parsed first: 8 such requests took a server from 112 to 303 MB. Here
each request announces a large ``Content-Length`` and sends *no* body: the server must answer
at once (it cannot have read a body that was never sent), and a heartbeat (whose body is a few
bytes) refuses a large one before reading it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import create_app

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
BIG = 15 * 1024 * 1024  # under the 16 MiB request limit: only the lease check can refuse it


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A served rail with one claimed task; its URL and the claim answer."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        async with serve_on_port(create_app(tracker, api_token="admin-token")) as url:
            admin = {"Authorization": "Bearer admin-token"}
            async with httpx.AsyncClient(base_url=url, headers=admin) as client:
                pid = await client.post("/pipelines", json={"name": "p", "definition": PIPELINE})
                task = {"pipeline_id": pid.json()["id"], "title": "t"}
                assert (await client.post("/tasks", json=task)).status_code == 201
                claim = {"agent_id": "w", "agent_role": "coder", "lease_ttl_ms": 60_000}
                lease = (await client.post("/leases/claim", json=claim)).json()
            yield url, lease
    finally:
        await tracker.aclose()


def _headers_only(url: str, path: str, token: str, length: int) -> tuple[int, Any]:
    """Send a POST's headers announcing ``length`` body bytes, none of them; the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            (
                f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            ).encode()
        )
        sock.settimeout(10)  # the old server waited for the body: this recv timed out
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed without an answer: {data!r}"
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        size = int(next(v for k, v in _fields(head) if k == b"content-length"))
        while len(rest) < size:
            chunk = sock.recv(65536)
            assert chunk
            rest += chunk
        return status, json.loads(rest)


def _fields(head: bytes) -> list[tuple[bytes, bytes]]:
    lines = head.split(b"\r\n")[1:]
    return [(k.strip().lower(), v.strip()) for k, _, v in (line.partition(b":") for line in lines)]


@pytest.mark.anyio
async def test_wrong_lease_or_token_is_refused_before_any_body_is_read(
    served: tuple[str, dict[str, Any]],
) -> None:
    url, lease = served
    run_id, lease_id, token = lease["run"]["id"], lease["lease_id"], lease["lease_token"]
    wrong = "0" * 64
    cases = [
        (f"/runs/{run_id}/events", wrong, BIG, 401),
        (f"/runs/{run_id}/transition", wrong, BIG, 401),
        (f"/runs/{run_id}/fail", wrong, BIG, 401),
        (f"/runs/{run_id}/release", wrong, BIG, 401),
        (f"/runs/{run_id}/events", "admin-token", BIG, 401),  # the admin token is no lease token
        ("/runs/no-such-run/events", token, BIG, 404),
        ("/runs/no-such-run/transition", wrong, BIG, 404),
        # A heartbeat's body is a few bytes: a large one is refused unread, whatever the token.
        (f"/leases/{lease_id}/heartbeat", wrong, BIG, 413),
        (f"/leases/{lease_id}/heartbeat", token, BIG, 413),
    ]
    for path, bearer, length, status in cases:
        got, body = await anyio.to_thread.run_sync(_headers_only, url, path, bearer, length)
        assert got == status, (path, got, body)
        assert set(body["error"]) >= {"code", "message"}

    # The right token still gets its body read, and the lease is unchanged by all of the above.
    async with httpx.AsyncClient(base_url=url) as client:
        auth = {"Authorization": f"Bearer {token}"}
        beat = await client.post(f"/leases/{lease_id}/heartbeat", headers=auth, json={})
        assert beat.status_code == 200, beat.text
        event = await client.post(
            f"/runs/{run_id}/events", headers=auth, json={"kind": "log", "data": "x" * 500_000}
        )
        assert event.status_code == 201, event.text
        done = await client.post(
            f"/runs/{run_id}/transition", headers=auth, json={"trigger": "complete"}
        )
        assert done.status_code == 200, done.text
        # The lease is gone now: a large request to it is refused unread as well.
    got, body = await anyio.to_thread.run_sync(
        _headers_only, url, f"/runs/{run_id}/events", token, BIG
    )
    assert got == 404, body


@pytest.mark.anyio
async def test_release_takes_the_lease_token_with_an_admin_token_set(
    served: tuple[str, dict[str, Any]],
) -> None:
    """``POST /runs/{id}/release`` is a lease route: the lease token, not the admin token."""
    url, lease = served
    run_id, token = lease["run"]["id"], lease["lease_token"]
    async with httpx.AsyncClient(base_url=url) as client:
        admin = {"Authorization": "Bearer admin-token"}
        refused = await client.post(f"/runs/{run_id}/release", headers=admin, json={})
        assert refused.status_code == 401, refused.text
        auth = {"Authorization": f"Bearer {token}"}
        released = await client.post(f"/runs/{run_id}/release", headers=auth, json={})
        assert released.status_code == 200, released.text
        assert released.json()["released"] is True
