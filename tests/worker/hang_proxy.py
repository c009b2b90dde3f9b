"""A real TCP proxy on 127.0.0.1 that forwards every request but hangs chosen ones.

A hung request is read in full and then never answered: the connection stays open, as a tracker
that accepted the connection but is stuck (a blocked process, a lost packet on a half-open link)
would leave it. Only a client-side timeout or a cancellation gets the caller out. A client on a
persistent connection (the served tracker advertises ``keep_alive``) sends its next request on
the same connection, each forwarded upstream on a fresh one (``Connection: close``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketStream

from tests.remote.fault_proxy import closing_request, kept_alive_answer, read_request


@dataclass
class HangProxy:
    """Forward to ``upstream_port``; a request whose request line holds one of ``hang_markers``
    hangs."""

    upstream_port: int
    hang_markers: tuple[bytes, ...] = (b"/heartbeat",)
    #: Request lines seen, in order (hung ones included).
    seen: list[bytes] = field(default_factory=list)
    hung: int = 0
    hanging: bool = True
    _forever: anyio.Event = field(default_factory=anyio.Event)

    async def handle(self, client: SocketStream) -> None:
        """Serve one client connection: its requests, one after the other."""
        async with client:
            while await self._one(client):
                pass

    async def _one(self, client: SocketStream) -> bool:
        """Serve one request; True when the client keeps the connection for another."""
        request = await read_request(client)
        if not request:
            return False
        line = request.split(b"\r\n", 1)[0]
        self.seen.append(line)
        if self.hanging and any(marker in line for marker in self.hang_markers):
            self.hung += 1
            await self._forever.wait()  # never answered; ends when the proxy stops
            return False
        request, close = closing_request(request)
        response = b""
        async with await anyio.connect_tcp("127.0.0.1", self.upstream_port) as upstream:
            await upstream.send(request)
            while True:
                try:
                    response += await upstream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
        try:
            await client.send(response if close else kept_alive_answer(response))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return not close


@contextlib.asynccontextmanager
async def serve_proxy(proxy: HangProxy) -> AsyncIterator[str]:
    """Listen on an ephemeral 127.0.0.1 port for ``proxy``; yield its base URL."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.handle)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            tg.cancel_scope.cancel()
