"""The PostgreSQL engine of the rail: pooled transactions, ``LISTEN/NOTIFY`` wake-ups.

Each operation's transaction runs on a pooled psycopg connection (:mod:`.db`) under the rail's
write lock: exclusive, or shared for :data:`SHARED_WRITES` (see :mod:`.claims`). A write that
:func:`~tracker_client.rules.engine.wakes_waiters` sends ``pg_notify`` on the rail's channel at
its commit (:mod:`.wake`), and every write but :data:`~.follow.FOLLOW_QUIET`'s sends one on
the follow channel while someone follows (:mod:`.follow`). A waiter listens (the listener starts
with the first one) and still looks every :data:`SAFETY_TICK_S`; a ``wait`` or a short claim
keeps this instance's ``waiters`` row alive so that the lease-ending moves notify it
(:mod:`.idle`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio

from tracker_client.postgres.db import Database
from tracker_client.postgres.dialect import STATEMENTS, PgConn
from tracker_client.postgres.follow import (
    FOLLOW_QUIET,
    FollowChannel,
    follow_channel,
    notify_prepared,
)
from tracker_client.postgres.idle import FRESH_TICK_S, WaitersRow
from tracker_client.postgres.pairing import CallPairs
from tracker_client.postgres.wake import Grants, Listener, channel_name
from tracker_client.rules.engine import Changes, wakes_waiters
from tracker_client.rules.statements import Statements

if TYPE_CHECKING:
    import sqlite3

__all__ = ["LISTEN_START_S", "ONE_TRIP_WRITES", "SAFETY_TICK_S", "SHARED_WRITES", "PgEngine"]

R = TypeVar("R")

#: Writes that run beside each other (the write lock in shared mode; every other write takes it
#: alone): claims (see .claims) and the lease's own writes, which lock and touch only their
#: task's row and run; a write they may not make shared (a dead letter, fan-in edges: a
#: statement without the ``shared`` hint, see :mod:`.dialect`) sends them round again alone.
SHARED_WRITES = frozenset(
    {
        *("claim", "claim_many", "heartbeat", "add_event", "transition", "fail", "finish"),
        *("release", "withdraw"),
    }
)
#: Writes tried first as ONE round trip on the event loop (:meth:`.db.Database.one_trip_write`):
#: a create whose statements are all deferred (its cap check on the server, schema 18; the
#: insert; the wake-ups) goes without a worker thread's hand-off or a second round trip; one
#: that reads (a pipeline version to look at again, a dedupe key, a dependency, an
#: idempotency key, INFO logging's depth) runs on a pooled connection as before.
ONE_TRIP_WRITES = frozenset({"create_task", "create_tasks"})
#: How long after a wake-up from another host a new wait lets the calls it started end first
#: (see :meth:`PgEngine._after_wake`), and how long it gives the claim to be sent.
REARM_AFTER_WAKE_S = 0.02
CLAIM_STARTS_S = 0.002
#: A waiter with a live wake-up listener still looks this often (a lost NOTIFY costs no more).
SAFETY_TICK_S = 5.0
#: How long the first waiter waits for ``LISTEN`` to be in place before it polls instead.
LISTEN_START_S = 5.0


class PgEngine:
    """The :class:`~tracker_client.rules.engine.Engine` over one schema of a PostgreSQL
    database (see the module docstring)."""

    def __init__(self, db: Database, poll_interval_s: float) -> None:
        self.db = db
        self._poll_interval_s = poll_interval_s
        self._changes = Changes()
        #: This instance's name on the channels (its own listener ignores what it sent).
        self.instance = secrets.token_hex(8)
        self.channel = channel_name(db.schema)
        self.follow_channel = follow_channel(db.schema)
        self._listener: Listener | None = None
        #: The rail's grant channel and its taker, set by the tracker (:mod:`.standing`).
        self.grants: Grants | None = None
        #: A pipeline's version as the rail last read it (None: not known), and what to do
        #: when a create found one moved on: set by the tracker (see :meth:`write`).
        self.known_version: Callable[[str], int | None] = _unknown
        self.versions_moved: Callable[[], None] = _nothing
        #: ``time.monotonic()`` of the last wake-up from another host (see _after_wake).
        self._woken_at = float("-inf")
        #: Wake-ups from other hosts so far (an idle parked claim tells them from this
        #: instance's own writes: :class:`~.idle.IdleLook`).
        self.woken_from_afar = 0
        # Channel and instance are hex names of ours: safe to spell in the statement.
        self._notify_sql = f"SELECT pg_notify('{self.channel}', '{self.instance}');"
        self._follow = notify_prepared(self.follow_channel, self.instance)
        #: This instance's ``waiters`` row (see :mod:`.idle`).
        self.waiters = WaitersRow(db, self.instance, self._changes)
        #: A ``finish_many`` and a claim ready together go as one statement (:mod:`.pairing`).
        self.pairs = CallPairs(db)
        self._following = FollowChannel(db, self.instance, self._changes, poll_interval_s)

    @property
    def statements(self) -> Statements:
        """The PostgreSQL statements."""
        return STATEMENTS

    @property
    def changes(self) -> Changes:
        """This instance's in-process wake-ups (set too by other hosts' NOTIFYs)."""
        return self._changes

    @property
    def path(self) -> str:
        """The rail's URL, without a password."""
        return self.db.shown

    async def write(
        self, where: str, job: Callable[[sqlite3.Connection], R], committed: Callable[[], None]
    ) -> R:
        """``job`` in a write transaction (shared for :data:`SHARED_WRITES`), its wake-ups
        queued before the commit; ``committed`` once it is done."""

        def body(conn: PgConn) -> R:
            # The rules only call execute() and in_transaction on their connection.
            result = job(cast("sqlite3.Connection", conn))
            if wakes_waiters(where, result):
                # Delivered at commit, to every host's listener (see .wake).
                conn.before_commit.append(self._notify_sql)
            if where not in FOLLOW_QUIET:
                conn.commit_with(self._follow)  # followers of every host
            return result

        if where in ONE_TRIP_WRITES:
            sent, found = await self.db.one_trip_write(
                body, where, self.known_version, self.versions_moved
            )
            if sent:
                committed()
                return cast(R, found)
        result = await self.db.run(body, where, write=True, shared=where in SHARED_WRITES)
        committed()
        return result

    async def read(self, where: str, job: Callable[[sqlite3.Connection], R]) -> R:
        """``job`` in a read transaction on a pooled connection."""
        return await self.db.run(
            lambda conn: job(cast("sqlite3.Connection", conn)), where, write=False
        )

    async def watch(self, wait_s: float | None) -> _Tick:
        """A waiter's look: sleep at most a tick (see :meth:`_tick`). Right after a wake-up
        from another host it first lets this instance's calls in flight end
        (:meth:`_after_wake`)."""
        await self._after_wake()
        return _Tick(await self._tick(wait_s))

    async def _after_wake(self) -> None:
        """A wait beginning within :data:`REARM_AFTER_WAKE_S` of a wake-up from another host
        waits until then for the calls in flight on the event loop's connections (the claim
        the wake-up started) to end: its own look at the rail (a read on a pool thread) would
        otherwise run beside that claim, on the same two cores, on the path of the pickup
        (docs/benchmarks/pickup.md). Nothing is missed meanwhile: a wake-up during
        it moves the change mark, and ``wait_for_work`` answers at once."""
        since = time.monotonic() - self._woken_at
        lane = self.db.lane
        if since >= REARM_AFTER_WAKE_S or lane is None:
            return
        with anyio.move_on_after(REARM_AFTER_WAKE_S - since):
            await anyio.sleep(max(0.0, CLAIM_STARTS_S - since))  # the claim is under way
            await lane.settled()

    def _woken(self) -> None:
        """Another host's write may have made work: wake this instance's waiters."""
        self._woken_at = time.monotonic()  # a loop callback: no anyio task context here
        self.woken_from_afar += 1
        self._changes.notify()

    async def follow(self, wait_s: float) -> _Tick:
        """A follower's look: listening on the follow channel (see :mod:`.follow`)."""
        return _Tick(await self._following.interest(wait_s))

    def wake_args(self, *, notify: bool = True, follow: bool = True) -> list[Any]:
        """The first parameters of a ``bw_*_tx`` call: the write lock's name, the rail's
        channel (None: a quiet write), the follow channel (None: nothing a follower reads),
        this instance's name (its own listener ignores what it sent)."""
        return [
            self.db.lock_name,
            self.channel if notify else None,
            self.follow_channel if follow else None,
            self.instance,
        ]

    async def _tick(self, wait_s: float | None = None) -> float:
        """How long a waiter may sleep without looking: the slow safety tick while the
        wake-up listener is up (started here on first use), else the poll interval (always
        behind a PgBouncer in transaction mode without ``listen_host``/``listen_port``). A ``wait``
        of up to ``wait_s`` keeps this instance's ``waiters`` row alive (see :mod:`.idle`;
        a short tick just after it was written)."""
        healthy, fresh = await self._listen(wait_s)
        if not healthy:
            return self._poll_interval_s
        return FRESH_TICK_S if fresh else SAFETY_TICK_S

    async def listening(self, wait_s: float) -> bool:
        """Whether a waiter of up to ``wait_s`` may rely on wake-ups alone: the listener is up
        and this instance's ``waiters`` row was live already (not written just now, when a
        move racing its commit may have sent none). The idle parked claim's test
        (:class:`~.idle.IdleLook`)."""
        healthy, fresh = await self._listen(wait_s)
        return healthy and not fresh

    async def _listen(self, wait_s: float | None) -> tuple[bool, bool]:
        """Start the wake-up listener on first use, keep the ``waiters`` row alive for a wait
        of ``wait_s``: (the listener is up, the row was written just now)."""
        listener = self._listener
        listen = self.db.listen_conninfo
        if listen is None:  # behind a PgBouncer with no direct address: poll
            return False, False
        if listener is None:
            listener = self._listener = Listener(
                listen, self.channel, self.instance, self._woken, self.grants
            )
            await anyio.to_thread.run_sync(listener.wait_listening, LISTEN_START_S)
        fresh = wait_s is not None and await self.waiters.wait_interest(wait_s)
        return listener.healthy, fresh

    async def aclose(self) -> None:
        """Stop the listeners, drop this instance's rows, close every connection. Idempotent."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await anyio.to_thread.run_sync(listener.stop())
        await self._following.aclose()
        await self.waiters.aclose()
        await self.db.aclose()


def _unknown(_pid: str) -> int | None:
    return None


def _nothing() -> None:
    return None


class _Tick:
    """A waiter's look on PostgreSQL: a NOTIFY sets the waiter's event; the tick bounds a sleep
    (a lost NOTIFY, a listener down)."""

    __slots__ = ("_tick",)

    def __init__(self, tick: float) -> None:
        self._tick = tick

    def stamp(self) -> None:
        """Nothing to note: a change after the read is a NOTIFY."""

    async def sleep(self, event: anyio.Event, limit_s: float) -> None:
        """Until ``event`` or ``min(limit_s, tick)``."""
        with anyio.move_on_after(min(limit_s, self._tick)):
            await event.wait()
