"""The client sends each request in one write (``OneWriteRequests``, the ``http://``
transport's network backend): a server is woken once per request, not for its head and again
for its body (docs/benchmarks/pickup.md). Real 127.0.0.1 sockets, a raw server in
a thread reading what arrives."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import httpx
import pytest

from tracker_client.nulltickets.connections import OneWriteRequests, http_client

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


@contextmanager
def raw_server(answer: bytes = ANSWER) -> Iterator[tuple[int, list[bytes]]]:
    """A server on 127.0.0.1 taking one connection: its first ``recv`` (what arrived in the
    first write) is recorded, the rest of the request read, then ``answer`` sent."""
    listener = socket.create_server(("127.0.0.1", 0))
    first: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            got = conn.recv(65536)
            first.append(got)
            while b"\r\n\r\n" not in got:  # the head, at least (a split request's body
                got += conn.recv(65536)  # is not waited for: the answer ends it)
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], first
    finally:
        thread.join(10)
        listener.close()


async def test_a_requests_head_and_body_arrive_in_one_write() -> None:
    # httpcore's own stream wrote the head, then (a pass of the loop later) the body: a server
    # blocked in recv usually woke for the head alone.
    body = b'{"title": "one write"}'
    with raw_server() as (port, first):
        async with http_client(f"http://127.0.0.1:{port}", None, httpx.Limits()) as client:
            answer = await client.post("/tasks", content=body)
        assert answer.status_code == 200 and answer.content == b"ok"
    [received] = first
    assert received.startswith(b"POST /tasks HTTP/1.1\r\n")
    assert received.endswith(b"\r\n\r\n" + body)  # the body came with the head


async def test_writes_wait_for_the_next_read_and_leave_as_one() -> None:
    with raw_server() as (port, first):
        stream = await OneWriteRequests().connect_tcp("127.0.0.1", port, timeout=10)
        try:
            await stream.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
            await stream.write(b"")
            await stream.write(b"\r\n")
            assert first == []  # nothing sent before the read
            got = b""
            with anyio.fail_after(10):
                while chunk := await stream.read(65536, timeout=10):
                    got += chunk
        finally:
            await stream.aclose()
    assert first == [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"]
    assert got == ANSWER


async def test_a_server_answering_before_it_read_the_body_is_heard() -> None:
    # As httpcore does: a request the server stopped reading (closed) is answered, not lost
    # to the write's error.
    refused = b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbig"
    with raw_server(refused) as (port, _):
        client = http_client(f"http://127.0.0.1:{port}", None, httpx.Limits())
        async with client:
            answer = await client.post("/tasks", content=b"x" * 200_000)
    assert (answer.status_code, answer.content) == (413, b"big")


async def test_an_idle_connection_the_server_closed_reads_as_readable() -> None:
    """httpcore drops an idle pooled connection whose socket is readable (the server closed
    it): the poll kept per connection answers as httpcore's backend does, before and after
    the close, and once the connection itself is closed."""
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        stream = await OneWriteRequests().connect_tcp("127.0.0.1", listener.getsockname()[1])
        server_side, _ = listener.accept()
        assert stream.get_extra_info("is_readable") is False
        assert stream.get_extra_info("is_readable") is False  # the kept poll, asked again
        server_side.close()
        with anyio.fail_after(5):
            while not stream.get_extra_info("is_readable"):
                await anyio.sleep(0.01)  # the FIN crossing the loopback
        await stream.aclose()
        assert stream.get_extra_info("is_readable") is True
    finally:
        listener.close()
