"""What the server at the other end can do: ``GET /health`` read once, as typed capabilities.

A plain NullTickets server advertises nothing; ``backlog-worker tracker serve`` lists its
extensions in ``"extensions"`` (:data:`~tracker_client.contract.table.EXTENSIONS`) and its
own request limit in ``"limits"``. :class:`Discovery` reads that once (the first request of a
client is its ``/health``), answers "is extension X there?" for the parts of the client, and
:func:`declared` turns it into the :class:`~tracker_client.capabilities.Capabilities` the worker,
the CLI and the contract suite read. May touch: the transport (one ``GET /health``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from tracker_client.capabilities import NULLTICKETS, NULLTICKETS_LEASE_TTL_MS, Capabilities
from tracker_client.contract.table import operation
from tracker_client.errors import Unsupported
from tracker_client.nulltickets.codec import loads
from tracker_client.nulltickets.transport import HttpTransport

__all__ = ["NULLTICKETS_LEASE_TTL_MS", "Advertised", "Discovery", "declared"]


@dataclass(frozen=True)
class Advertised:
    """What the server said about itself in ``GET /health``.

    A plain NullTickets server advertises nothing; ``backlog-worker tracker serve`` lists its
    extension routes in ``"extensions"`` and its own request limit in ``"limits"``.
    """

    extensions: frozenset[str] = field(default_factory=frozenset)
    max_request_bytes: int | None = None

    @classmethod
    def from_health(cls, doc: Any) -> Advertised:
        """Read the capability fields of a ``/health`` answer (absent on NullTickets)."""
        if not isinstance(doc, dict):
            return cls()
        raw = doc.get("extensions")
        names = frozenset(x for x in raw if isinstance(x, str)) if isinstance(raw, list) else None
        limits = doc.get("limits")
        limit = limits.get("max_request_bytes") if isinstance(limits, dict) else None
        return cls(
            extensions=names or frozenset(),
            max_request_bytes=limit if isinstance(limit, int) and limit > 0 else None,
        )


def declared(caps: Advertised) -> Capabilities:
    """The typed capabilities a served rail's advertised extension names stand for."""
    ext = caps.extensions
    if not ext:
        return NULLTICKETS
    return Capabilities(
        answers_can_be_lost=True,
        max_lease_ttl_ms=None if "heartbeat_ttl" in ext else NULLTICKETS_LEASE_TTL_MS,
        max_request_bytes=caps.max_request_bytes,
        backlog_ops={"cancel", "cancel_all", "requeue", "maintenance"} <= ext,
        wait={"wait", "wait_for_work"} <= ext,
        run_details={"runs", "task_events", "fail_result"} <= ext,
        task_extensions="backlog" in ext,
        release="release" in ext,
        strict_definitions="backlog" in ext,
        strict_limits=caps.max_request_bytes is not None,
        extensions=ext,
    )


class Discovery:
    """Reads ``GET /health`` once per client and answers for the extensions it listed.

    A server's advertised ``max_request_bytes`` replaces the transport's configured size guard
    (the served tracker takes larger requests than NullTickets' 64 KiB).
    """

    _HEALTH = operation("health")

    def __init__(self, http: HttpTransport, url: str) -> None:
        self._http = http
        #: The server's base URL (named in errors).
        self.url = url
        self._configured_max_request_bytes = http.max_request_bytes
        self._advertised: Advertised | None = None
        self._lock = anyio.Lock()

    @property
    def advertised(self) -> Advertised | None:
        """What ``/health`` advertised; None until the first request."""
        return self._advertised

    async def health(self) -> Any:
        """``GET /health`` now (also refreshing what is advertised); its JSON document."""
        op = self._HEALTH
        response = await self._http.send(op.method, op.path, auth=op.auth)
        doc = loads(response, f"{op.method} {op.path}")
        self._set(Advertised.from_health(doc))
        return doc

    def _set(self, advertised: Advertised) -> None:
        self._advertised = advertised
        self._http.max_request_bytes = (
            advertised.max_request_bytes or self._configured_max_request_bytes
        )
        # Persistent connections only with a server that says it takes them (a plain
        # NullTickets server is single-threaded: one idle connection would block it).
        self._http.use_keep_alive("keep_alive" in advertised.extensions)

    async def get(self) -> Advertised:
        """What the server advertises, reading ``/health`` the first time only."""
        if self._advertised is None:
            async with self._lock:
                if self._advertised is None:
                    await self.health()
        assert self._advertised is not None
        return self._advertised

    async def capabilities(self) -> Capabilities:
        """The typed capabilities of the server (:func:`declared`)."""
        return declared(await self.get())

    async def has(self, extension: str) -> bool:
        """True when the server lists ``extension`` (a name of ``contract.EXTENSIONS``)."""
        return extension in (await self.get()).extensions

    async def require(self, extension: str, what: str) -> None:
        """``Unsupported`` naming ``what`` unless the server lists ``extension``."""
        if not await self.has(extension):
            raise Unsupported(
                f"{what} is not supported by the tracker at {self.url}: a NullTickets server "
                "has no such endpoint (it works on the embedded tracker and on "
                "`backlog-worker tracker serve`)",
                code="unsupported",
            )

    @property
    def max_lease_ttl_ms(self) -> int | None:
        """The longest lease the server keeps across heartbeats (None = no limit).

        A NullTickets heartbeat resets the lease to 300 s: a worker must heartbeat more often
        than that whatever TTL it asked. Known for sure after the first request; until then the
        safe value (300 s) is reported.
        """
        if self._advertised is not None and "heartbeat_ttl" in self._advertised.extensions:
            return None
        return NULLTICKETS_LEASE_TTL_MS
