"""The client's HTTP layer on real 127.0.0.1 sockets, on every event loop a worker may run on.

Every fault a raw socket server can produce (an answer cut short, a malformed status line,
headers without end, no answer at all, a refused connection, a close before any answer) fails
as ``TrackerUnavailable`` with the code the worker acts on, and the httpx exception under it.
Good answers (chunked, with ``Content-Length``, running to the close, after a 1xx, bigger than
one read) read whole. A real uvicorn app checks the whole client on it, in both connection
modes; a recording server checks the connections the client's two configurations make (one
reused in keep-alive mode, one per request otherwise, one the server closed never reused).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import TrackerUnavailable
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.nulltickets.connections import (
    KEEP_ALIVE_CONNECTIONS,
    KEEP_ALIVE_EXPIRY_S,
    PlainHttpTransport,
)
from tracker_client.nulltickets.connections import http_client as _client
from tracker_client.nulltickets.options import ClientOptions
from tracker_client.nulltickets.transport import HttpTransport
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

#: The event loops a worker may run on (``[worker] event_loop``, and trio through anyio).
LOOPS = pytest.mark.parametrize(
    "anyio_backend",
    [("asyncio", {}), ("asyncio", {"use_uvloop": True}), ("trio", {})],
    ids=["asyncio", "uvloop", "trio"],
)
Handler = Callable[[anyio.abc.SocketStream], Awaitable[None]]
OK = b'{"status":"ok"}'


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[str]:
    """A TCP listener on 127.0.0.1 running ``handler`` per connection; yields its URL."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def guarded(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            with suppress(anyio.BrokenResourceError, anyio.EndOfStream, anyio.ClosedResourceError):
                await handler(stream)

    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, guarded)
        yield f"http://127.0.0.1:{port}"
        tg.cancel_scope.cancel()
    await listener.aclose()


async def _request_head(stream: anyio.abc.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    return data


def _answering(answer: bytes) -> Handler:
    """A handler that reads one request, sends ``answer`` and closes."""

    async def handle(stream: anyio.abc.SocketStream) -> None:
        await _request_head(stream)
        await stream.send(answer)

    return handle


async def _silent(stream: anyio.abc.SocketStream) -> None:
    await _request_head(stream)
    await anyio.sleep_forever()


async def _hang_up(stream: anyio.abc.SocketStream) -> None:
    await _request_head(stream)


PLAIN = httpx.Limits(max_keepalive_connections=0, max_connections=100)
#: The limits the client uses once a server advertises ``keep_alive``.
KEEP_ALIVE = httpx.Limits(
    max_keepalive_connections=KEEP_ALIVE_CONNECTIONS,
    max_connections=100,
    keepalive_expiry=KEEP_ALIVE_EXPIRY_S,
)


async def _get(url: str, path: str = "/health") -> httpx.Response:
    """One GET through the client's own HTTP layer (its default transport)."""
    http = HttpTransport(ClientOptions.parse(url, timeout_s=0.5))
    try:
        return await http.send("GET", path, auth="public")
    finally:
        await http.aclose()


async def _outcome(url: str) -> tuple[str, str]:
    """What a GET ends in: (TrackerUnavailable code, httpx exception)."""
    with pytest.raises(TrackerUnavailable) as info:
        await _get(url)
    return str(info.value.code), type(info.value.__cause__).__name__


CUT = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10
CUT_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"
MALFORMED = b"HTTP/1.1 abc\r\n\r\n"
NOT_HTTP = b"hello there\r\n\r\n"
ENDLESS_HEAD = b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"y" * 200_000


@LOOPS
@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (_answering(CUT), ("connection_error", "RemoteProtocolError")),
        (_answering(CUT_CHUNKED), ("connection_error", "RemoteProtocolError")),
        (_answering(MALFORMED), ("connection_error", "RemoteProtocolError")),
        (_answering(NOT_HTTP), ("connection_error", "RemoteProtocolError")),
        (_answering(ENDLESS_HEAD), ("connection_error", "RemoteProtocolError")),
        (_hang_up, ("connection_error", "RemoteProtocolError")),
        (_silent, ("timeout", "ReadTimeout")),
    ],
    ids=["cut", "cut-chunked", "malformed-status", "not-http", "endless-head", "hang-up", "silent"],
)
async def test_a_fault_fails_as_tracker_unavailable_with_its_code(
    handler: Handler, expected: tuple[str, str]
) -> None:
    async with raw_server(handler) as url:
        assert await _outcome(url) == expected


async def test_a_refused_connection_fails_as_a_connection_error() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # nothing listens there now
    url = f"http://127.0.0.1:{port}"
    assert await _outcome(url) == ("connection_error", "ConnectError")


BIG = json.dumps({"items": ["z" * 1000] * 300}).encode()


def _chunked(body: bytes, size: int) -> bytes:
    parts = [
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
        for i in range(0, len(body), size)
    ]
    return b"".join(parts) + b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OK), OK), OK),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(OK, 4), OK),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + OK, OK),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + OK, OK),
        (b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BIG), BIG), BIG),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(BIG, 70_000), BIG),
    ],
    ids=["content-length", "chunked", "to-the-close", "after-1xx", "big-http-1.0", "big-chunked"],
)
async def test_an_answer_is_read_whole(answer: bytes, body: bytes) -> None:
    async with raw_server(_answering(answer)) as url:
        response = await _get(url)
    assert response.status_code == 200 and response.content == body


class Recorder:
    """An HTTP/1.1 server offering keep-alive: each connection's requests, and closes seen."""

    def __init__(self, close_after: int = 0) -> None:
        self.connections: list[list[bytes]] = []
        self.closed_by_client = 0
        #: Close each connection after this many answers (0: never).
        self.close_after = close_after
        self.closed_by_server = 0

    async def handle(self, stream: anyio.abc.SocketStream) -> None:
        requests: list[bytes] = []
        self.connections.append(requests)
        buffer = b""
        while True:
            try:
                chunk = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                self.closed_by_client += 1
                return
            buffer += chunk
            while b"\r\n\r\n" in buffer:
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(rest) < length:
                    break
                requests.append(head + b"\r\n\r\n" + rest[:length])
                buffer = rest[length:]
                await stream.send(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OK), OK)
                )
                if self.close_after and len(requests) >= self.close_after:
                    await stream.aclose()
                    self.closed_by_server += 1
                    return


async def _until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while not condition():
            await anyio.sleep(0.005)  # polling a real condition (the server's state)


@LOOPS
async def test_keep_alive_reuses_one_connection_and_closes_it_at_the_end() -> None:
    server = Recorder()
    async with raw_server(server.handle) as url:
        async with _client(url, None, KEEP_ALIVE) as client:
            for _ in range(3):
                assert (await client.post("/x", content=b'{"a":1}')).content == OK
            assert server.closed_by_client == 0
        await _until(lambda: server.closed_by_client == 1)
    assert [len(c) for c in server.connections] == [3]


async def test_one_connection_per_request_without_keep_alive() -> None:
    server = Recorder()
    async with raw_server(server.handle) as url:
        async with _client(url, None, PLAIN) as client:
            for _ in range(3):
                await client.get("/x", headers={"Connection": "close"})
        await _until(lambda: server.closed_by_client == 3)
    assert [len(c) for c in server.connections] == [1, 1, 1]


@LOOPS
async def test_a_connection_the_server_closed_is_not_reused() -> None:
    server = Recorder(close_after=1)
    async with (
        raw_server(server.handle) as url,
        _client(url, None, KEEP_ALIVE) as client,
    ):
        for n in range(1, 4):
            await client.post("/x", content=b"{}")
            await _until(lambda: server.closed_by_server == n)  # noqa: B023 (awaited here)
    assert [len(c) for c in server.connections] == [1, 1, 1]


async def test_the_wire_bytes_are_one_request_with_its_credentials() -> None:
    server = Recorder()
    async with raw_server(server.handle) as url:
        http = HttpTransport(ClientOptions.parse(url, api_token="admin-secret"))
        try:
            await http.send(
                "POST",
                "/runs/r1/events",
                body=b'{"k":1}',
                auth="lease",
                lease_token="lease-secret",
                idempotency_key="key-1",
            )
        finally:
            await http.aclose()
    ((request,),) = server.connections
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"post /runs/r1/events http/1.1" and body == b'{"k":1}'
    assert b"authorization: bearer lease-secret" in lines and b"admin-secret" not in head
    assert {b"content-length: 7", b"connection: close", b"idempotency-key: key-1"} <= set(lines)


def test_http_goes_through_httpx_without_tls_and_https_with_it() -> None:
    """``http://``: httpx's transport built without an SSL context; ``https://``: httpx's own,
    verifying; an injected transport is used as it is."""
    assert type(_client("http://127.0.0.1:9", None, PLAIN)._transport) is PlainHttpTransport
    injected = httpx.MockTransport(lambda request: httpx.Response(200))
    assert _client("http://127.0.0.1:9", injected, PLAIN)._transport is injected
    https = _client("https://127.0.0.1:9", None, PLAIN)._transport
    assert type(https) is httpx.AsyncHTTPTransport


async def _chunked_app(
    scope: dict[str, object], receive: object, send: Callable[..., Awaitable[None]]
) -> None:
    """A bare ASGI app answering in three body messages: uvicorn sends it chunked."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    for part in (b'{"status":', b'"ok",', b'"n":1}'):
        await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def test_a_chunked_answer_from_uvicorn() -> None:
    async with serve_on_port(_chunked_app) as url:
        response = await _get(url, "/anything")
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.json() == {"status": "ok", "n": 1}


@pytest.mark.parametrize("keep_alive", [True, False], ids=["served", "plain"])
async def test_a_whole_task_over_uvicorn(tmp_path: Path, keep_alive: bool) -> None:
    embedded = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    pipeline = {
        "initial": "todo",
        "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
        "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
    }
    try:
        async with serve_on_port(create_app(embedded)) as url:
            tracker = RemoteTracker(url)
            try:
                await tracker.health()
                pooled = tracker._http._pooled
                if not keep_alive and pooled is not None:
                    tracker._http._pooled = None  # as a plain server's client: one per request
                    await pooled.aclose()
                assert tracker._http.keep_alive is keep_alive
                pid = await tracker.create_pipeline("p", pipeline)
                tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
                lease = await tracker.claim("a", "coder", 60_000)
                assert lease is not None
                await tracker.add_event(lease, "step", {"n": 1})
                assert (await tracker.transition(lease, "complete")).new_stage == "done"
            finally:
                await tracker.aclose()
        assert (await embedded.get_task(tid)).stage == "done"
    finally:
        await embedded.aclose()


@LOOPS
async def test_an_answer_far_larger_than_the_read_buffer_is_read_whole() -> None:
    """A 5 MiB answer: the connection stops reading past its buffer's limit and resumes as
    the answer is read (on asyncio, the loop's transport; on trio, httpcore's stream)."""
    big = b"[" + b",".join([b'"' + b"q" * 1000 + b'"'] * 5000) + b"]"
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big)
    async with raw_server(_answering(answer)) as url:
        response = await _get(url)
    assert response.content == big


@LOOPS
async def test_a_body_the_server_never_reads_fails_as_a_write_timeout() -> None:
    """A request body larger than the socket buffers, to a server that never reads (its
    listener never accepts: the kernel completes the connection and buffers what it can):
    the write waits for room within the client's timeout, then fails as a write timeout."""
    body = b"{" + b" " * (32 * 1024 * 1024) + b"}"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        http = HttpTransport(ClientOptions.parse(url, timeout_s=0.5, max_request_bytes=1 << 26))
        try:
            with pytest.raises(TrackerUnavailable) as info:
                await http.send("POST", "/tasks", body=body, auth="public")
        finally:
            await http.aclose()
    assert info.value.code == "timeout"
    assert type(info.value.__cause__).__name__ == "WriteTimeout"
