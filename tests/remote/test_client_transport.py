"""The client's transport on a real 127.0.0.1 socket: one connection per request, never idle.

The real server is single-threaded and blocks while any connection is open, so the client must
close every connection after its answer even when the server would keep it alive, must send
``Content-Length`` (never chunked) and must not leave a pool of idle sockets.
"""

from __future__ import annotations

import json

import anyio
import pytest
from anyio.abc import SocketStream

from tracker_client.errors import ConfigError, TrackerUnavailable
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings


class KeepAliveServer:
    """An HTTP/1.1 server that *offers* keep-alive and records each connection's requests."""

    def __init__(self) -> None:
        self.connections: list[list[bytes]] = []
        self.closed_by_client = 0

    async def handle(self, stream: SocketStream) -> None:
        requests: list[bytes] = []
        self.connections.append(requests)
        buffer = b""
        async with stream:
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
                    body = json.dumps(
                        {"status": "ok", "version": "t"}
                        if head.startswith(b"GET /health")
                        else {"id": "p1"}
                    ).encode()
                    await stream.send(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Connection: keep-alive\r\nContent-Length: "
                        + str(len(body)).encode()
                        + b"\r\n\r\n"
                        + body
                    )


@pytest.mark.anyio
async def test_every_request_uses_its_own_connection_and_closes_it() -> None:
    server = KeepAliveServer()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        tracker = RemoteTracker(f"http://127.0.0.1:{port}")
        try:
            for _ in range(3):
                await tracker.create_pipeline("p", {"initial": "a"})
        finally:
            await tracker.aclose()
        with anyio.fail_after(5):
            while server.closed_by_client < 4:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    await listener.aclose()
    # /health (capability detection) + 3 creates, each on its own connection.
    assert [len(c) for c in server.connections] == [1, 1, 1, 1]
    for (request,) in server.connections[1:]:
        head = request.split(b"\r\n\r\n")[0].lower()
        assert b"connection: close" in head
        assert b"content-length:" in head and b"transfer-encoding" not in head


@pytest.mark.anyio
async def test_connection_refused_is_unavailable() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # nothing listens there now
    tracker = RemoteTracker(
        f"http://127.0.0.1:{port}",
        retry=RetrySettings(attempts=2, initial_s=0.001, max_wait_s=0.001),
    )
    try:
        with pytest.raises(TrackerUnavailable) as info:
            await tracker.health()
    finally:
        await tracker.aclose()
    assert info.value.code == "connection_error"


@pytest.mark.parametrize(
    ("url", "options", "needle"),
    [
        ("ftp://127.0.0.1", {}, "expected http://"),
        ("http://127.0.0.1:7700?timeout=5", {}, "unknown option(s) timeout"),
        ("http://127.0.0.1:7700?timeout_s=soon", {}, "timeout_s='soon'"),
        ("http://127.0.0.1:7700", {"retry_attempts": "0"}, "attempts must be >= 1"),
        ("http://127.0.0.1:7700", {"max_request_bytes": 10}, "max_request_bytes"),
    ],
)
def test_bad_options_name_what_is_wrong(url, options, needle) -> None:
    with pytest.raises(ConfigError) as info:
        RemoteTracker(url, **options)
    assert needle in str(info.value)


@pytest.mark.anyio
async def test_url_options_are_coerced() -> None:
    tracker = RemoteTracker(
        "http://127.0.0.1:7700/?timeout_s=2.5&retry_attempts=3&max_request_bytes=50000"
    )
    try:
        assert tracker.url == "http://127.0.0.1:7700"
        assert tracker._http.timeout.read == 2.5
        assert tracker._http.retry.attempts == 3
        assert tracker._http.max_request_bytes == 50_000
    finally:
        await tracker.aclose()
