"""Who waits for what a lease's end may bring: the ``waiters`` rows (schema 10).

Every waking write sends ``pg_notify`` at its commit (see :mod:`.wake`), and each NOTIFY wakes
every listening backend of every host and its listener thread. The hot path's lease-ending
moves (a plain transition, ``finish_many``'s plain transitions: schema 9's ``bw_transition_tx``
and ``bw_finish_many_tx``) are most of a busy rail's writes, and what they may bring (a task in
a new stage, dependents or a concurrency key or a stage slot freed, a task finished) only
matters to an instance that is idle: a claim that came back short, or a caller of ``wait``.
They cannot revoke another lease, so the workers' standing watch (which heartbeats in-flight
leases on a wake-up, for cancels) does not need them. So they NOTIFY only while some instance
has a live row in ``waiters``: written when a claim of this instance leases fewer than asked
(:meth:`WaitersRow.claimed_short`) and by ``wait`` (:meth:`WaitersRow.wait_interest`), alive
a while on the server's clock. Every other write notifies as before.

A move racing the row's first commit (its check before the row existed, its commit after the
claim's look) is covered at once: a freshly written row wakes this instance's waiters in
process, so the idle claim loop claims again after it. A ``wait`` sleeps at most
:data:`FRESH_TICK_S` after writing its row. This room writes only the ``waiters`` table.
"""

from __future__ import annotations

import contextlib

import anyio

from tracker_client.postgres.db import Database
from tracker_client.postgres.dialect import PgConn
from tracker_client.rules.engine import Changes

__all__ = ["FRESH_TICK_S", "IDLE_ROW_S", "INTEREST_MARGIN_S", "WaitersRow"]

#: A waiting instance's row outlives its longest wait by this much (seconds).
INTEREST_MARGIN_S = 30
#: How long a short claim keeps the instance's row alive (an idle claim loop claims again well
#: within it, refreshing it); a row with less than half of it left is refreshed.
IDLE_ROW_S = 30
#: The longest first sleep after the row was (re)written (a write racing its commit).
FRESH_TICK_S = 1.0

# psycopg's own placeholders, on the raw connection (no domain rule is involved).
_INTEREST = (
    "INSERT INTO waiters (instance, expires_at) "
    "VALUES (%s, clock_timestamp() + make_interval(secs => %s)) "
    "ON CONFLICT (instance) DO UPDATE SET "
    "expires_at = GREATEST(waiters.expires_at, EXCLUDED.expires_at)"
)
_FORGET_STALE = "DELETE FROM waiters WHERE expires_at < clock_timestamp() - interval '1 hour'"


class WaitersRow:
    """This instance's ``waiters`` row, kept while it has waiters (part of the engine)."""

    def __init__(self, db: Database, instance: str, changes: Changes) -> None:
        self._db = db
        self._instance = instance
        self._changes = changes
        #: ``anyio.current_time()`` until which this instance's ``waiters`` row is known alive.
        self._waiting_until = 0.0

    async def claimed_short(self) -> None:
        """A claim leased fewer than asked: keep the row alive; a fresh row wakes this
        instance's waiters (the claim loop claims again, after the row is seen)."""
        if self._waiting_until >= anyio.current_time() + IDLE_ROW_S / 2:
            return
        # The claim has committed: its leases are answered whatever happens to the row (a
        # row not written costs an idle loop its wake-up for the moves, never a lease).
        fresh = False
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            fresh = await self.wait_interest(IDLE_ROW_S - INTEREST_MARGIN_S)
        if fresh:
            self._changes.notify()

    async def wait_interest(self, wait_s: float) -> bool:
        """Keep this instance's row alive past a wait of ``wait_s``; True when it was written
        now (the caller's first sleep is then at most :data:`FRESH_TICK_S`)."""
        now = anyio.current_time()
        if self._waiting_until >= now + wait_s + 1:
            return False
        lasts = int(wait_s) + INTEREST_MARGIN_S
        fresh = self._waiting_until <= now  # the row may have lapsed: writes may have skipped

        def register(conn: PgConn) -> None:
            conn.raw.execute(_FORGET_STALE.encode())
            conn.raw.execute(_INTEREST.encode(), (self._instance, lasts))

        await self._db.run(register, "wait_interest", write=True, shared=True)
        self._waiting_until = now + lasts
        return fresh

    async def aclose(self) -> None:
        """Stop waiting: this instance's row goes (best effort: it expires anyway)."""
        if self._waiting_until:
            self._waiting_until = 0.0
            with contextlib.suppress(Exception):
                await self._db.run(
                    lambda conn: conn.raw.execute(
                        b"DELETE FROM waiters WHERE instance = %s", (self._instance,)
                    ),
                    "wait_interest",
                    write=True,
                    shared=True,
                )
