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
token is derived from its key, tracker_client/embedded/leasekeys.py; without this mode a hung
claim that lands after its retry reaches the served tracker's own replay.)

The proxy runs on its own thread (:meth:`FaultProxy.start`), so a synchronous test driving real
worker processes, or a bench, can use it; :attr:`FaultProxy.stats` counts what it did.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.from_thread import start_blocking_portal

from tests.remote.fault_proxy import closing_request, kept_alive_answer, read_request

__all__ = ["NULLTICKETS_HEARTBEAT_MS", "FaultProxy", "Hang"]

#: What a plain NullTickets heartbeat grants, whatever TTL was asked.
NULLTICKETS_HEARTBEAT_MS = 300_000


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
    """Forwards to ``upstream_port`` on 127.0.0.1, hanging what the ``hangs`` rules pick."""

    upstream_port: int
    hangs: Sequence[Hang] = ()
    seed: int = 1
    plain_nulltickets: bool = False
    #: ``forwarded``, ``hung``, ``hung_sent`` (held, then forwarded), ``hung_landed``,
    #: ``health_rewritten``, ``heartbeat_rewritten``, ``claim_replayed``.
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
            tg.start_soon(listener.serve, self._handle)
            task_status.started(listener.extra(SocketAttribute.local_port))
            await stop.wait()
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

    async def _handle(self, client: SocketStream) -> None:
        async with client:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                while await self._one(client):
                    pass

    async def _one(self, client: SocketStream) -> bool:
        """Serve one request; True when the client keeps the connection for another."""
        request = await read_request(client)
        if not request:
            return False
        line = request.split(b"\r\n", 1)[0].decode("latin-1")
        request, close = closing_request(self._rewrite_request(line, request))
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
