"""A fault-injecting HTTP proxy on 127.0.0.1, for one-request-per-connection and keep-alive clients.

Each request gets a fate, drawn from a seeded RNG:

* ``reset``: the request is read, then the connection is reset (RST) without forwarding it;
* ``drop``: the request is forwarded, the server answers (and has committed), then the client's
  connection is reset instead of getting that answer;
* ``delay``: forwarded after a random delay;
* ``pass``: forwarded as-is.

The proxy reads a whole request (headers + ``Content-Length`` body), sends it upstream on a fresh
connection with ``Connection: close`` (so the server closes after answering) and relays the
answer up to the server's end of stream. A client on a persistent connection (``keep_alive``)
gets the answer without the server's ``connection: close`` and sends its next request on the same
connection: a ``reset`` or ``drop`` then kills a kept-alive connection mid-request, as a server
restart or an idle timeout racing a request would.
"""

from __future__ import annotations

import random
import socket
import struct
from collections import Counter
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketAttribute, SocketStream

MAX_HEAD = 64 * 1024


async def read_request(stream: SocketStream) -> bytes:
    """One HTTP request: headers and a Content-Length body (b"" if the peer closed first)."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        try:
            chunk = await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return b""
        buffer += chunk
        if len(buffer) > MAX_HEAD and b"\r\n\r\n" not in buffer:
            return b""
    head, _, body = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        try:
            body += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return b""
    return head + b"\r\n\r\n" + body


def closing_request(request: bytes) -> tuple[bytes, bool]:
    """``request`` with ``Connection: close`` (for the upstream), and whether the client sent it."""
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    kept = [lines[0]] + [ln for ln in lines[1:] if not ln.lower().startswith(b"connection:")]
    asked = any(ln.lower().replace(b" ", b"") == b"connection:close" for ln in lines[1:])
    return b"\r\n".join([*kept, b"Connection: close"]) + b"\r\n\r\n" + body, asked


def kept_alive_answer(response: bytes) -> bytes:
    """The answer without the server's ``connection: close`` (the client keeps its connection)."""
    head, _, body = response.partition(b"\r\n\r\n")
    lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def reset(stream: SocketStream) -> None:
    """Make the coming close an RST (SO_LINGER 0), as a crashed or overloaded server would."""
    sock: socket.socket = stream.extra(SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@dataclass
class FaultProxy:
    """Forward to ``upstream_port`` with ``reset_rate``/``drop_rate``/``delay_rate`` faults."""

    upstream_port: int
    seed: int = 1
    reset_rate: float = 0.05
    drop_rate: float = 0.05
    delay_rate: float = 0.2
    max_delay_s: float = 0.05
    stats: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def _fate(self) -> str:
        roll = self._rng.random()
        if roll < self.reset_rate:
            return "reset"
        if roll < self.reset_rate + self.drop_rate:
            return "drop"
        if roll < self.reset_rate + self.drop_rate + self.delay_rate:
            return "delay"
        return "pass"

    async def handle(self, client: SocketStream) -> None:
        """Serve one client connection: its requests, one after the other, until one closes it."""
        async with client:
            while await self._one(client):
                self.stats["kept_alive"] += 1

    async def _one(self, client: SocketStream) -> bool:
        """Serve one request; True when the client keeps the connection for another."""
        request = await read_request(client)
        if not request:
            return False
        request, close = closing_request(request)
        fate = self._fate()
        self.stats[fate] += 1
        if fate == "reset":
            reset(client)
            return False
        if fate == "delay":
            await anyio.sleep(self._rng.uniform(0, self.max_delay_s))
        response = b""
        try:
            async with await anyio.connect_tcp("127.0.0.1", self.upstream_port) as upstream:
                await upstream.send(request)
                while True:
                    try:
                        response += await upstream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
        except OSError:
            self.stats["upstream_error"] += 1
            reset(client)
            return False
        if fate == "drop":
            reset(client)  # the server committed; the client never hears of it
            return False
        try:
            await client.send(response if close else kept_alive_answer(response))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return not close
