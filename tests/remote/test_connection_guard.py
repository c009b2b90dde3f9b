"""``ConnectionGuard`` in process, on each event loop ``tracker serve`` may run on (uvloop where
installed, asyncio's own elsewhere) and with both of uvicorn's protocols: the deadlines reach
the right connection through the request's task (a context variable asyncio copies into it),
also for pipelined requests, and a connection between requests or with a late body is closed
at the guard's deadline, well before uvicorn's own keep-alive timeout (5 s). The subprocess
tests (``test_server_connections``, ``test_resource_caps``) cover the caps and slow headers.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.remote.fixtures import QuietServer
from tests.remote.test_server_connections import _read_answers, closed_by_server
from tracker_client.serve.connections import ConnectionGuard, ConnectionLimits

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

LOOPS = pytest.mark.parametrize(
    "anyio_backend",
    [("asyncio", {}), ("asyncio", {"use_uvloop": True})],
    ids=["asyncio", "uvloop"],
)
HTTP = pytest.mark.parametrize("http", ["h11", "httptools"])
#: Far below uvicorn's keep-alive timeout, so a close this early is the guard's.
HEADER_S, BODY_S = 0.5, 0.5


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the whole body, answers 200 with its length."""
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    answer = str(len(body)).encode()
    headers = [(b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


@asynccontextmanager
async def guarded(http: str, limits: ConnectionLimits, app: ASGIApp = _app) -> AsyncIterator[int]:
    """uvicorn on 127.0.0.1 with the guard, as ``tracker serve`` runs it; yields the port."""
    guard = ConnectionGuard(limits, http)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # Nagle off
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        guard.wrap(app),
        log_config=None,
        access_log=False,
        lifespan="off",
        ws="none",
        http=guard.protocol,
        timeout_keep_alive=5,
    )
    server = QuietServer(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            await server.ready.wait()
        try:
            yield sock.getsockname()[1]
        finally:
            server.stop()
    sock.close()


async def _closed_within(sock: socket.socket, seconds: float) -> float:
    """How long the server took to close ``sock`` (read in a thread: the server runs here)."""
    started = time.monotonic()
    assert await anyio.to_thread.run_sync(closed_by_server, sock, seconds)
    return time.monotonic() - started


@LOOPS
@HTTP
async def test_pipelined_answers_then_idle_closes_at_the_header_deadline(http: str) -> None:
    limits = ConnectionLimits(header_timeout_s=HEADER_S, body_timeout_s=BODY_S)
    async with guarded(http, limits) as port:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            get = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            post = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc"
            sock.sendall(get + post + get)
            statuses = await anyio.to_thread.run_sync(_read_answers, sock, 3, 10)
            assert statuses == [200, 200, 200]
            assert await _closed_within(sock, 10) < 3
        assert (limits.timed_out, limits.open, dict(limits.per_client)) == (1, 0, {})


@LOOPS
@HTTP
async def test_a_late_body_closes_at_the_body_deadline(http: str) -> None:
    limits = ConnectionLimits(header_timeout_s=HEADER_S, body_timeout_s=BODY_S)
    async with guarded(http, limits) as port:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\nab")
            assert await _closed_within(sock, 10) < 3
        assert limits.timed_out == 1


@LOOPS
@HTTP
async def test_an_answers_head_waits_for_its_body_and_both_leave_in_one_write(http: str) -> None:
    # uvicorn writes the head as the application starts its answer: the client would be woken
    # for it and again for the body (docs/benchmarks/pickup.md).
    head_sent, go = anyio.Event(), anyio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [(b"content-length", b"5")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        head_sent.set()
        await go.wait()
        await send({"type": "http.response.body", "body": b"hello"})

    async with guarded(http, ConnectionLimits(), app) as port:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            with anyio.fail_after(10):
                await head_sent.wait()
            with pytest.raises(BlockingIOError):  # nothing on the wire yet: the head is held
                sock.recv(65536, socket.MSG_DONTWAIT)
            go.set()
            first = await anyio.to_thread.run_sync(sock.recv, 65536)
            assert first.startswith(b"HTTP/1.1 200 OK\r\n")
            assert first.endswith(b"\r\n\r\nhello")  # the head and the body in one read


@LOOPS
@HTTP
async def test_a_streamed_answer_and_one_that_fails_after_its_head_still_reach_the_client(
    http: str,
) -> None:
    async def streamed(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        if scope["path"] == "/fails":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            raise RuntimeError("broken after its head")  # uvicorn closes the connection
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async with guarded(http, ConnectionLimits(), streamed) as port:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = await anyio.to_thread.run_sync(_read_all, sock)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"one " in answer and b"three" in answer
            assert answer.endswith(b"0\r\n\r\n")  # the chunked answer's end
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET /fails HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = await anyio.to_thread.run_sync(_read_all, sock)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")  # the head, then the close


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes ``sock`` (10 s at most)."""
    sock.settimeout(10)
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got
