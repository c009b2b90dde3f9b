"""``backlog-worker mcp --http``: streamable HTTP behind a bearer token, and a served rail's
scoped token limiting what the tools may do (docs/submit/mcp.md).

Real processes on 127.0.0.1: the MCP server, ``tracker serve`` for the served rail; the SDK's
own streamable HTTP client. A request without the token (or with another) is a 401 that never
quotes a token; a producer token's tools reach its pipelines only, the rest is a tool error
naming the scope.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from tests.mcp.kit import CLI, http_server, http_session, ok, refused, stdio_session
from tests.worker.daemonkit import TOKEN, clean_env, create_token, make_rail, serve_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(120)]

HTTP_TOKEN = "mcp-http-token-0123456789abcdef"
OTHER_PIPELINE = """
name = "other"
[definition]
initial = "todo"
[definition.states.todo]
agent_role = "coder"
[definition.states.done]
terminal = true
[[definition.transitions]]
from = "todo"
to = "done"
trigger = "complete"
"""
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}


def _secret_file(path: Path, value: str) -> Path:
    path.write_text(value + "\n")
    path.chmod(0o600)
    return path


def _mcp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "mcp", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
        timeout=60,
        check=False,
    )


async def test_http_needs_the_bearer_token_and_serves_the_tools_with_it(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    token_file = _secret_file(tmp_path / "http.token", HTTP_TOKEN)
    args = ("--tracker", f"sqlite://{db}", "--http-token-file", str(token_file))
    with http_server(tmp_path, *args) as url:
        headers = {"Accept": "application/json, text/event-stream"}
        for sent, why in (
            ({}, "missing bearer token"),
            ({"Authorization": HTTP_TOKEN}, "missing bearer token"),
            ({"Authorization": "Bearer wrong-token"}, "wrong bearer token"),
            ({"Authorization": f"Bearer {HTTP_TOKEN}x"}, "wrong bearer token"),
        ):
            answer = httpx.post(url, json=INIT, headers={**headers, **sent}, timeout=10)
            assert answer.status_code == 401, answer.text
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert answer.json()["error"] == {
                "code": "unauthorized",
                "message": f"{why}: send Authorization: Bearer",
            }
            assert HTTP_TOKEN not in answer.text
        # the scheme is case-insensitive (RFC 9110); the SDK answers the initialize
        lower = {**headers, "Authorization": f"bearer {HTTP_TOKEN}"}
        assert httpx.post(url, json=INIT, headers=lower, timeout=10).status_code == 200

        async with http_session(url, HTTP_TOKEN) as mcp:
            task_id = (await ok(mcp, "submit", pipeline="flow", title="over http"))["task_id"]
            waited = await ok(mcp, "wait", task_id=task_id, timeout_s=0.2)
            assert (waited["finished"], waited["task"]["title"]) == (False, "over http")
            page = await ok(mcp, "list_tasks", pipeline="flow")
            assert [t["id"] for t in page["items"]] == [task_id]
    assert HTTP_TOKEN not in (tmp_path / "mcp-http.log").read_text()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--http", "127.0.0.1:0"], "--http needs a bearer token"),
        (["--http", "0.0.0.0:0"], "--http needs a bearer token"),
        (["--http", "127.0.0.1:99999"], "--http '127.0.0.1:99999'"),
        (["--http", "nowhere"], "give HOST:PORT"),
        (["--http-token-file", "/dev/null"], "--http-token-file is for --http"),
    ],
    ids=["no-token", "no-token-anywhere", "bad-port", "bad-address", "token-without-http"],
)
def test_http_is_refused_without_a_token_or_with_a_bad_address(
    tmp_path: Path, args: list[str], says: str
) -> None:
    db = make_rail(tmp_path)
    done = _mcp("--tracker", f"sqlite://{db}", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr


async def test_a_producer_token_limits_the_tools_to_its_pipelines(tmp_path: Path) -> None:
    with serve_tracker(tmp_path) as (rail_url, db):
        other = tmp_path / "other.toml"
        other.write_text(OTHER_PIPELINE)
        made = subprocess.run(
            [*CLI, "pipeline", "create", "-f", str(other), "--tracker", f"sqlite://{db}"],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=60,
            check=False,
        )
        assert made.returncode == 0, made.stderr
        producer = create_token(db, "app", "--kind", "producer", "--pipeline", "flow")
        token_file = _secret_file(tmp_path / "producer.token", producer)
        args = ("--tracker", rail_url, "--token-file", str(token_file))

        async with stdio_session(tmp_path / "mcp.log", *args) as mcp:
            mine = await ok(mcp, "submit", pipeline="flow", title="allowed")
            detail = await ok(mcp, "get_task", task_id=mine["task_id"])
            assert detail["title"] == "allowed"
            denied = await refused(mcp, "submit", pipeline="other", title="not mine")
            assert "credentials do not allow it (403)" in denied, denied
            assert "scope: pipelines flow" in denied and "may not create" in denied, denied
            store = await refused(mcp, "store_put", namespace="n", key="k", value=1)
            assert "(403)" in store and "producer" in store, store
            for text in (denied, store):
                assert producer not in text and TOKEN not in text

        # The HTTP front of a served rail takes the token it acts with, and nothing else.
        with http_server(tmp_path, *args) as url:
            async with http_session(url, producer) as mcp:
                page = await ok(mcp, "list_tasks", pipeline="flow")
                assert [t["title"] for t in page["items"]] == ["allowed"]
            refused_admin = httpx.post(
                url,
                json=INIT,
                headers={
                    "Authorization": f"Bearer {TOKEN}",
                    "Accept": "application/json, text/event-stream",
                },
                timeout=10,
            )
            assert refused_admin.status_code == 401
        logs = (tmp_path / "mcp.log").read_text() + (tmp_path / "mcp-http.log").read_text()
        assert producer not in logs


async def test_the_listening_socket_gives_connections_without_nagle() -> None:
    # asyncio sets TCP_NODELAY on an accepted connection only when the listening socket was made
    # with IPPROTO_TCP; with Nagle on, each answer on a kept-alive connection waited ~40 ms for
    # the client's delayed ACK. A real asyncio server on the socket `bind` makes.
    import asyncio
    import socket

    from tracker_client.mcp.http import bind

    loop = asyncio.get_running_loop()
    nodelay: asyncio.Future[int] = loop.create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            nodelay.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await loop.create_server(Probe, sock=bind("127.0.0.1", 0))
    try:
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        assert await asyncio.wait_for(nodelay, 10) == 1
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
