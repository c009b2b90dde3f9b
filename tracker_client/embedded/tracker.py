"""``EmbeddedTracker``: the :class:`~tracker_client.protocol.Tracker` on a local SQLite file.

It is :class:`~tracker_client.rules.rail.Rail` (every operation, once, over the rules) on the
SQLite engine (:class:`~.engine.SqliteEngine`): opening the file and declaring what the rail can
do are all that is its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Self

from tracker_client.capabilities import EMBEDDED, Capabilities
from tracker_client.contract.extensions import EXTENSIONS
from tracker_client.embedded.db import Database
from tracker_client.embedded.engine import SqliteEngine
from tracker_client.errors import ConfigError
from tracker_client.rules.engine import Clock, wall_ms
from tracker_client.rules.options import parse_options
from tracker_client.rules.rail import Rail
from tracker_client.sweeps import SweepCounts

__all__ = ["EmbeddedTracker"]


#: What the embedded rail declares: :data:`~tracker_client.capabilities.EMBEDDED`'s powers and
#: every extension of the wire contract (it implements each operation of the table).
_CAPABILITIES = replace(EMBEDDED, extensions=frozenset(EXTENSIONS))


class EmbeddedTracker(Rail[SqliteEngine]):
    """The embedded SQLite tracker. Create it with ``await EmbeddedTracker.open(path)``."""

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        clock: Clock | None = None,
        sweeps: SweepCounts | None = None,
        **options: Any,
    ) -> Self:
        """Open (creating and migrating if needed) the tracker database at ``path``.

        Options (strings from a URL are coerced): ``synchronous`` (``NORMAL``; ``FULL`` for
        power-loss durability), ``busy_timeout_ms`` (5000), ``max_backlog_depth`` (100000, 0 =
        unlimited), ``role_backlog_depth`` (role -> cap), ``max_stale_attempts`` (3),
        ``idempotency_ttl_s`` (86400), ``poll_interval_s`` (0.05), ``retention_days`` (30, 0 =
        keep finished tasks forever). ``clock`` returns epoch ms. ``sweeps``: where every
        committed sweep of expired leases is counted (:mod:`tracker_client.sweeps`).
        Raises ``ConfigError`` for a bad option, ``TrackerCorrupt`` for a file that is not ours.
        """
        if clock is not None and not callable(clock):
            raise ConfigError(
                "embedded tracker option clock: must be a callable returning epoch ms"
            )
        opts = parse_options(options)
        if not isinstance(path, str) or not path:
            raise ConfigError("embedded tracker: the database path is empty")
        db = await Database.open(
            path, synchronous=opts.synchronous, busy_timeout_ms=opts.busy_timeout_ms
        )
        return cls(SqliteEngine(db, opts.poll_interval_s), opts, clock or wall_ms, sweeps)

    async def capabilities(self) -> Capabilities:
        """Every rule of the backlog semantics (docs/guarantees/backlog.md), in process.

        Every write commits and answers in the caller's process, and an error means nothing was
        committed, so an answer is never lost: callers need no idempotency keys (they still work).
        """
        return _CAPABILITIES
