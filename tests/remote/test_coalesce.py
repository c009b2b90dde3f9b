"""``CoalescingTransport``: the pieces of one answer leave in one write, on a real TCP connection
(127.0.0.1); a recording shim between it and the real transport counts the writes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tracker_client.serve.coalesce import CoalescingTransport


class Recording:
    """Forwards to the real transport, noting each write."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class Peer:
    """The far end: what arrived, and whether it was closed."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.closed = asyncio.Event()


@pytest.fixture
async def wire() -> AsyncIterator[tuple[CoalescingTransport, Recording, Peer]]:
    loop = asyncio.get_running_loop()
    peer = Peer()

    class Sink(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            peer.received.extend(data)

        def connection_lost(self, exc: Exception | None) -> None:
            peer.closed.set()

    server = await loop.create_server(Sink, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
    recording = Recording(transport)
    try:
        yield CoalescingTransport(recording, loop), recording, peer  # type: ignore[arg-type]
    finally:
        transport.close()
        server.close()
        await server.wait_closed()


async def _arrived(peer: Peer, size: int) -> None:
    async with asyncio.timeout(10):
        while len(peer.received) < size:
            await asyncio.sleep(0.01)  # polls a real condition (bytes arrived) under a deadline


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_an_answers_pieces_leave_in_one_write_at_flush(wire: Any) -> None:
    coalescing, recording, peer = wire
    coalescing.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    coalescing.write(b"{}")
    coalescing.write(b"")  # an empty end of message writes nothing
    assert recording.writes == []
    assert coalescing.get_write_buffer_size() >= 40
    coalescing.flush()
    assert recording.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await _arrived(peer, 40)
    assert bytes(peer.received).endswith(b"\r\n\r\n{}")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_unflushed_writes_leave_at_the_next_turn_of_the_loop(wire: Any) -> None:
    coalescing, recording, peer = wire
    coalescing.write(b"chunk-1;")
    coalescing.write(b"chunk-2;")
    await asyncio.sleep(0)  # one turn: the streaming answer's pieces go out together
    assert recording.writes == [b"chunk-1;chunk-2;"]
    await _arrived(peer, 16)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_close_sends_what_was_written_first(wire: Any) -> None:
    coalescing, recording, peer = wire
    coalescing.write(b"last words")
    coalescing.close()
    assert recording.writes == [b"last words"]
    assert coalescing.is_closing()  # the wrapped transport's own
    await _arrived(peer, 10)
    async with asyncio.timeout(10):
        await peer.closed.wait()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_abort_drops_what_was_not_sent(wire: Any) -> None:
    coalescing, recording, peer = wire
    coalescing.write(b"never sent")
    coalescing.abort()
    await asyncio.sleep(0)
    assert recording.writes == []
    async with asyncio.timeout(10):
        await peer.closed.wait()
    assert bytes(peer.received) == b""
