"""A fault-injecting HTTP proxy on 127.0.0.1 that hangs chosen requests, for tests and benches.

It forwards every request to a server on 127.0.0.1 (each on a fresh upstream connection, with
``Connection: close``) and relays the answer; a client on a persistent connection keeps it. A
request matched by a :class:`Hang` rule instead:

* ``landed=False``: is held ``hang_s`` seconds *before* it is forwarded (a stuck tracker that
  handles it late, or never when ``hang_s`` is None); the client may have given up meanwhile,
  and the request still lands then, as a server that gets unstuck would handle it;
* ``landed=True``: is forwarded at once (it lands), and its answer held ``hang_s`` seconds (or
  for ever) before the client gets it.

Rules pick requests by a substring of the request line and either a seeded random ``rate`` (1 %
of all requests) or the ``nth`` matching ones (the second heartbeat). With ``plain_nulltickets``
the proxy makes a ``backlog-worker tracker serve`` behind it behave as a plain NullTickets
server does where the worker's leases are concerned (docs/guarantees/stalled-tracker.md): its
``/health`` advertises no extensions (so the client uses none: no release, no batched reports,
no persistent connections), every heartbeat asks for 300 s whatever the worker asked, as a
NullTickets heartbeat resets every lease to 300 s, and a claim sent again with the same
``Idempotency-Key`` gets the answer recorded for that key, the same lease with the same token,
as NullTickets replays it. (The served tracker now answers the same token too: a keyed claim's
token is derived from its key, tracker_client/rules/leasekeys.py; without this mode a hung
claim that lands after its retry reaches the served tracker's own replay.)

Besides the hang rules, each request can get a seeded random transport fault (``reset_rate``,
``drop_rate``, ``delay_rate``; all 0 by default):

* ``reset``: the request is read, then the connection is reset (RST) without forwarding it;
* ``drop``: the request is forwarded, the server answers (and has committed), then the client's
  connection is reset instead of getting that answer;
* ``delay``: forwarded after a random delay of up to ``max_delay_s``;
* ``pass``: forwarded as-is.

A ``reset`` or ``drop`` on a kept-alive connection kills it mid-request, as a server restart or
an idle timeout racing a request would.

The proxy runs on its own thread (:meth:`FaultProxy.start`), so a synchronous test driving real
worker processes, or a bench, can use it; an async test serves it in its own event loop
(:meth:`FaultProxy.serve`, or ``listener.serve(proxy.handle)``). :attr:`FaultProxy.stats`
counts what it did.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.from_thread import start_blocking_portal

__all__ = [
    "NULLTICKETS_HEARTBEAT_MS",
    "FaultProxy",
    "Hang",
    "closing_request",
    "kept_alive_answer",
    "read_request",
    "reset",
]

#: What a plain NullTickets heartbeat grants, whatever TTL was asked.
NULLTICKETS_HEARTBEAT_MS = 300_000

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


@dataclass(frozen=True)
class Hang:
    """Hang the requests whose request line holds ``match`` (``""``: all of them): a ``rate``
    of them (seeded), or the ``nth`` ones (1-based, counted among the matching requests)."""

    match: str = ""
    rate: float = 0.0
    nth: frozenset[int] = frozenset()
    #: How long the request (or its answer) is held; None: until the proxy stops.
    hang_s: float | None = 12.0
    #: Forward first and hold the answer (True), or hold the request, then forward it (False).
    landed: bool = False


@dataclass
class FaultProxy:
    """Forwards to ``upstream_port`` on 127.0.0.1, hanging what the ``hangs`` rules pick and
    faulting a ``reset_rate``/``drop_rate``/``delay_rate`` share of the requests."""

    upstream_port: int
    hangs: Sequence[Hang] = ()
    seed: int = 1
    plain_nulltickets: bool = False
    reset_rate: float = 0.0
    drop_rate: float = 0.0
    delay_rate: float = 0.0
    max_delay_s: float = 0.05
    #: ``forwarded``, ``hung``, ``hung_sent`` (held, then forwarded), ``hung_landed``,
    #: ``health_rewritten``, ``heartbeat_rewritten``, ``claim_replayed``, ``upstream_error``,
    #: ``kept_alive``; with fault rates, each request's fate (``reset``, ``drop``, ``delay``,
    #: ``pass``).
    stats: Counter[str] = field(default_factory=Counter)
    #: The request lines seen, in order.
    seen: list[str] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._claims: dict[bytes, bytes] = {}  # plain NullTickets: claim answers by key
        self._matched: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()

    # -- life cycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The proxy's base URL (after :meth:`start`)."""
        return f"http://127.0.0.1:{self.port}"

    def set_hangs(self, hangs: Sequence[Hang]) -> None:
        """Replace the rules (from any thread); requests already held stay held."""
        with self._lock:
            self.hangs = tuple(hangs)
            self._matched.clear()

    @contextlib.contextmanager
    def start(self) -> Iterator[FaultProxy]:
        """Serve on an ephemeral 127.0.0.1 port on a thread of its own until the block ends
        (held requests are dropped then)."""
        with start_blocking_portal() as portal:
            stop = portal.call(anyio.Event)
            future, port = portal.start_task(self._serve, stop)
            self.port = port
            try:
                yield self
            finally:
                portal.call(stop.set)
                future.result(timeout=10)

    async def _serve(self, stop: anyio.Event, *, task_status: Any) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, self.handle)
            task_status.started(listener.extra(SocketAttribute.local_port))
            await stop.wait()
            tg.cancel_scope.cancel()

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        """Serve on an ephemeral 127.0.0.1 port in the caller's event loop; yield the base URL."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, self.handle)
            try:
                yield self.url
            finally:
                tg.cancel_scope.cancel()

    # -- one connection ---------------------------------------------------------------------------
    def _pick(self, line: str) -> Hang | None:
        with self._lock:
            self.seen.append(line)
            for i, rule in enumerate(self.hangs):
                if rule.match not in line:
                    continue
                self._matched[i] += 1
                if self._matched[i] in rule.nth or (rule.rate and self._rng.random() < rule.rate):
                    return rule
        return None

    def _fate(self) -> str:
        """``reset``, ``drop``, ``delay`` or ``pass``, drawn from the seeded RNG (no draw at all
        when every rate is 0, so the hang rules' draws stay as they were)."""
        if not (self.reset_rate or self.drop_rate or self.delay_rate):
            return "pass"
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
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                while await self._one(client):
                    self.stats["kept_alive"] += 1

    async def _one(self, client: SocketStream) -> bool:
        """Serve one request; True when the client keeps the connection for another."""
        request = await read_request(client)
        if not request:
            return False
        line = request.split(b"\r\n", 1)[0].decode("latin-1")
        request, close = closing_request(self._rewrite_request(line, request))
        fate = self._fate()
        self.stats[fate] += 1
        if fate == "reset":
            reset(client)
            return False
        if fate == "delay":
            await anyio.sleep(self._rng.uniform(0, self.max_delay_s))
        rule = self._pick(line)
        if rule is not None and not rule.landed:
            self.stats["hung"] += 1
            await _hold(rule.hang_s)
        key = self._claim_key(line, request)
        response = self._claims.get(key) if key else None
        if response is None:
            response = await self._forward(request)
            if rule is not None and not rule.landed:
                self.stats["hung_sent"] += 1  # a held request, forwarded after its hold
            if key and response is not None and not response.startswith(b"HTTP/1.1 5"):
                self._claims[key] = response
        else:
            self.stats["claim_replayed"] += 1
        if rule is not None and rule.landed:
            self.stats["hung_landed"] += 1
            await _hold(rule.hang_s)
        if response is None:
            return False
        if fate == "drop":
            reset(client)  # the server committed; the client never hears of it
            return False
        self.stats["forwarded"] += 1
        response = self._rewrite_response(line, response)
        await client.send(response if close else kept_alive_answer(response))
        return not close

    async def _forward(self, request: bytes) -> bytes | None:
        """Send ``request`` upstream; the whole answer (None: the server is gone)."""
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
            return None
        return response

    # -- plain NullTickets -----------------------------------------------------------------------
    def _claim_key(self, line: str, request: bytes) -> bytes | None:
        """The ``Idempotency-Key`` of a claim (plain NullTickets mode only), else None."""
        if not self.plain_nulltickets or not line.startswith("POST /leases/claim "):
            return None
        head = request.partition(b"\r\n\r\n")[0]
        for header in head.split(b"\r\n")[1:]:
            name, _, value = header.partition(b":")
            if name.strip().lower() == b"idempotency-key":
                return value.strip()
        return None

    def _rewrite_request(self, line: str, request: bytes) -> bytes:
        """A heartbeat asks for 300 s (a plain NullTickets heartbeat ignores what was asked)."""
        if not self.plain_nulltickets or not line.startswith("POST /leases/"):
            return request
        if "/heartbeat" not in line:
            return request
        self.stats["heartbeat_rewritten"] += 1
        head, _, _ = request.partition(b"\r\n\r\n")
        body = json.dumps({"lease_ttl_ms": NULLTICKETS_HEARTBEAT_MS}).encode()
        return _with_body(head, body)

    def _rewrite_response(self, line: str, response: bytes) -> bytes:
        """``/health`` answers without ``extensions`` and ``limits`` (a plain server's)."""
        if not self.plain_nulltickets or not line.startswith("GET /health "):
            return response
        head, _, body = response.partition(b"\r\n\r\n")
        try:
            doc = json.loads(body)
        except ValueError:
            return response
        if not isinstance(doc, dict):
            return response
        self.stats["health_rewritten"] += 1
        doc.pop("extensions", None)
        doc.pop("limits", None)
        return _with_body(head, json.dumps(doc).encode())


def _with_body(head: bytes, body: bytes) -> bytes:
    """``head`` (request or status line and headers) with ``body`` and its Content-Length."""
    lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"content-length:")]
    lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def _hold(hang_s: float | None) -> None:
    if hang_s is None:
        await anyio.sleep_forever()
    await anyio.sleep(hang_s)
