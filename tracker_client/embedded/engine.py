"""The SQLite engine of the rail: transactions on the database thread, other processes' writes.

Each operation of :class:`~tracker_client.rules.rail.Rail` hands one closure to the database
thread (:mod:`.db`); writes run in one ``BEGIN IMMEDIATE`` transaction each (group-committed),
reads in one deferred transaction. A worker's reports and the claim riding with them
(:mod:`tracker_client.ahead`) go as one job of two writes (:meth:`SqliteEngine.write_both`).
Waiters in this process are woken by the write itself (the rail's
:class:`~tracker_client.rules.engine.Changes`); writes of other processes sharing the file
are noticed by polling ``PRAGMA data_version`` every ``poll_interval_s``, gated by the WAL
file's stat. Followers of a task's events wake on every such commit.

``data_version`` moves on every commit, heartbeats and events included, so it alone would wake
every idle worker of every process on each of them. A write that wakes waiters
(:func:`~tracker_client.rules.engine.wakes_waiters`) also bumps the ``wakes`` counter inside its
own transaction (``wake.bump``); a waiter that sees ``data_version`` move reads the counter and
sleeps on while it is unchanged. A release before the counter does not bump it, so a waiter
still looks once a second after an unannounced commit (:data:`SAFETY_LOOK_S`): in a fleet
mid-upgrade, an older writer's new work is picked up within that second instead of the poll.

The poll is the fallback: a waking write also sends one datagram to every other instance with
waiters (:mod:`.wakeup`), which wakes them at once. So while this instance's wake-up socket is
bound, a waiter's poll is only a safety net (a lost datagram, a writer of a release before the
sockets, a write that failed to answer after its commit): it looks once every 0.75-1 s
(:data:`SAFETY_LOOK_S`), and any commit since the waiter's read then wakes it, so a write no
datagram announced is still picked up within a second. The poll runs every ``poll_interval_s``
only where the datagrams cannot stand in for it: no socket could be bound (the waiter then
relies on the poll alone), a follower (events and heartbeats send no datagram), a rail without
the wake counter. An idle worker's loop then wakes about once a second for the poll, not 20
times (docs/benchmarks/costs.md).
"""

from __future__ import annotations

import os
import random
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from tracker_client.embedded.db import Database
from tracker_client.embedded.wakeup import WakeSockets
from tracker_client.rules.engine import Changes, wakes_waiters
from tracker_client.rules.statements import Statements

__all__ = ["PARKED_WRITES", "SAFETY_LOOK_S", "STATEMENTS", "SqliteEngine"]

#: The SQLite engine's named statements (``tracker_client/embedded/sql/*.sql``).
STATEMENTS = Statements.load("tracker_client.embedded", "sqlite")
_BUMP = STATEMENTS["wake.bump"]
_COUNT = STATEMENTS["wake.count"]
#: A waiter that saw another connection commit without bumping the wake counter still wakes
#: after this long (a writer of a release before the counter announces nothing). With this
#: instance's wake-up socket bound, also the longest gap between two looks of the poll (each
#: drawn between 75 % and all of it), which is then only the datagrams' safety net.
SAFETY_LOOK_S = 1.0
#: Writes that wait a pass or two for the next write to share their transaction
#: (:meth:`.db.Database.run_write`): a worker's batch of final reports, which the claim for the
#: slots its runs freed follows.
PARKED_WRITES = frozenset({"finish_many"})

R = TypeVar("R")


class SqliteEngine:
    """The :class:`~tracker_client.rules.engine.Engine` over one SQLite file (or ``:memory:``)."""

    def __init__(self, db: Database, poll_interval_s: float) -> None:
        self.db = db
        self._poll_interval_s = poll_interval_s
        self._changes = Changes()
        self._dv = 0
        self._dv_at = -1e18
        self._wakes: int | None = None
        self._wal_signature: tuple[int, int, int] | None = None
        #: How many times a sleeper of this instance was woken by another connection's commit
        #: (what the wake counter keeps low; tests and benches read it).
        self.woken = 0
        #: The cross-process wake-up sockets (none for an in-memory rail: one connection).
        self.wake: WakeSockets | None = None if db.path == ":memory:" else WakeSockets(db.path)
        #: Whether a write of :data:`PARKED_WRITES` waits for the next write now (the
        #: tracker's: not while its worker's claims are answered from leases claimed ahead,
        #: when no claim comes to share the commit).
        self.pairing: Callable[[], bool] = _always

    @property
    def statements(self) -> Statements:
        """The SQLite statements."""
        return STATEMENTS

    @property
    def changes(self) -> Changes:
        """This instance's in-process wake-ups."""
        return self._changes

    @property
    def path(self) -> str:
        """The database file (``:memory:`` for an in-memory rail)."""
        return self.db.path

    async def aclose(self) -> None:
        """Close the database and stop its threads (the wake-up socket's too). Idempotent."""
        if self.wake is not None:
            await self.wake.aclose()
        await self.db.aclose()
        if self.wake is not None:
            self.wake.close_sender()

    async def write_both(
        self,
        first: tuple[str, Callable[[sqlite3.Connection], Any], Callable[[], None]],
        second: tuple[str, Callable[[sqlite3.Connection], Any], Callable[[], None]],
    ) -> list[tuple[bool, Any]]:
        """Two writes ((where, job, committed), as :meth:`write` takes each) in one
        transaction, ``first`` first, handed to the database thread as one job and answered
        together (:meth:`.db.Database.run_writes`): each one's ``(True, result)`` or
        ``(False, error)``. Each bumps the wake counter and rings as its own write would."""
        writes: list[tuple[Callable[[], Any], str, Callable[[], None] | None]] = []
        for where, job, committed in (first, second):
            body, after = self._body(where, job, committed)
            writes.append((body, where, after))
        return await self.db.run_writes(writes)

    def _body(
        self, where: str, job: Callable[[sqlite3.Connection], R], committed: Callable[[], None]
    ) -> tuple[Callable[[], R], Callable[[], None]]:
        """``job`` as the database thread runs it in a write (the wake counter bumped when
        it wakes waiters) and what runs once it committed (the wake-up sockets rung first)."""
        db, wake = self.db, self.wake

        def body() -> R:
            result = job(db.conn)
            if wakes_waiters(where, result):
                db.conn.execute(_BUMP)
                if wake is not None:
                    wake.pending = True
            return result

        if wake is None:
            return body, committed

        def after() -> None:
            wake.ring()  # first: the other processes' waiters are what a caller waits on
            committed()

        return body, after

    async def write(
        self, where: str, job: Callable[[sqlite3.Connection], R], committed: Callable[[], None]
    ) -> R:
        """``job`` in a ``BEGIN IMMEDIATE`` transaction on the database thread (group commit:
        ``committed`` runs there, right after the commit). A write that wakes waiters bumps the
        wake counter in the same transaction and, once committed, rings the other instances'
        wake-up sockets (once per group commit), for the other processes' waiters. A write of
        :data:`PARKED_WRITES` waits a pass or two for the next write to share its commit."""
        body, after = self._body(where, job, committed)
        park = where in PARKED_WRITES and self.pairing()
        return await self.db.run_write(body, where, after, park=park)

    async def read(self, where: str, job: Callable[[sqlite3.Connection], R]) -> R:
        """``job`` in a deferred transaction on the database thread."""
        db = self.db
        return await db.run(lambda: db.read(lambda: job(db.conn), where))

    async def watch(self, wait_s: float | None) -> _Seen:
        """A look at ``data_version`` and the wake counter (see :class:`_Seen`); the first
        binds this instance's wake-up socket (:mod:`.wakeup`)."""
        if self.wake is not None:
            self.wake.listen(self._changes.notify, self._nobody_waits)
        return _Seen(self, follower=False)

    def _nobody_waits(self) -> bool:
        """Whether no ``wait`` or ``wait_for_work`` of this instance is under way (the
        wake-up socket is then not read until the next one: :meth:`.wakeup.WakeSockets.listen`)."""
        return self._changes.waiters == 0

    async def follow(self, wait_s: float) -> _Seen:
        """A follower's look: every commit may be an event of its task."""
        return _Seen(self, follower=True)

    def _look(self) -> tuple[int, int | None]:
        """``data_version`` and the wake counter (None: the rail has no counter), on the
        database thread."""
        db = self.db
        version = db.data_version()
        try:
            wakes = int(db.conn.execute(_COUNT).fetchone()[0])
        except sqlite3.OperationalError:
            wakes = None  # a rail not migrated here: every commit wakes, as before the counter
        return version, wakes

    async def _sleep_until_change(
        self, event: anyio.Event, seen: tuple[int, int | None], follower: bool, limit_s: float
    ) -> None:
        """Until an in-process write sets ``event``, another connection's commit that concerns
        the sleeper (``seen``: the ``data_version`` and wake counter its read saw; a
        ``follower`` wakes on any commit), or ``limit_s``.

        The cross-process poll is a task of its own that sleeps between looks, beside one wait
        on ``event``: a timed wait per look (a cancel scope timing out every
        ``poll_interval_s``) cost an idle worker about three times the CPU (1.5 % of a core
        against 0.5 %, measured at the default 50 ms)."""
        error: Exception | None = None
        # The poll ends by its own scope, which only this wait cancels (on its way out,
        # whatever ended it), so it returns rather than ending as a cancelled task: anyio keeps
        # a cancelled task's CancelledError in a reference cycle with its frames, left to the
        # cyclic collector (one per pickup and per idle round of a parked claim).
        polling = anyio.CancelScope(shield=True)
        with anyio.move_on_after(limit_s):
            async with anyio.create_task_group() as tg:

                async def poll() -> None:
                    nonlocal error
                    with polling:
                        try:
                            await self._poll_until_moved(seen, follower)
                        except Exception as exc:  # raised as it is, not in an exception group
                            error = exc
                        tg.cancel_scope.cancel()

                tg.start_soon(poll)
                try:
                    await event.wait()
                finally:
                    polling.cancel()
        if error is not None:
            raise error

    async def _poll_until_moved(self, seen: tuple[int, int | None], follower: bool) -> None:
        """Return once another connection's commit concerns the sleeper: for a ``follower``
        any commit since ``seen``; for a waiter, a commit that
        bumped the wake counter past ``seen``, a rail without the counter, or any commit at
        all once :data:`SAFETY_LOOK_S` passed (an older release's writer bumps nothing).

        Each look comes after ``poll_interval_s`` +-25 % (uniform): processes polling one file
        do not fall into step, and neither does a periodic task of the same process (anyio's
        ``wait_all_tasks_blocked``, sleeping 0.1 s between looks, locked into phase with a
        fixed 0.05 s poll and always saw the poller's timer just fired, so it never returned).
        A waiter whose instance has its wake-up socket bound looks only every 75-100 % of
        :data:`SAFETY_LOOK_S` (:meth:`_safety_net_only`), and any commit since ``seen`` then
        wakes it: the looks are that far apart already, and a write no datagram announced is
        picked up within the second.
        """
        version, wakes = seen
        started = anyio.current_time()
        while True:
            net = self._safety_net_only(follower, wakes)
            if net:
                gap = max(self._poll_interval_s, SAFETY_LOOK_S) * (0.75 + 0.25 * random.random())
            else:
                gap = self._poll_interval_s * (0.75 + 0.5 * random.random())
            await anyio.sleep(gap)
            # The stat gate can miss a same-size rewrite within one mtime tick, so a real
            # check still runs at least once a second.
            now = anyio.current_time()
            if self._wal_may_have_changed() or now - self._dv_at > 1.0:
                # Refresh the shared look: other sleepers of this instance read it too,
                # since only the first to stat a change sees the signature move.
                self._dv, self._wakes = await self.db.run(self._look)
                self._dv_at = anyio.current_time()
            if self._dv == version:
                continue
            if (
                net
                or follower
                or wakes is None
                or self._wakes != wakes
                or now - started >= SAFETY_LOOK_S
            ):
                self.woken += 1
                return

    def _safety_net_only(self, follower: bool, wakes: int | None) -> bool:
        """Whether a sleeper's poll is only the safety net of the wake-up datagrams: a waiter
        (not a follower: events send none) on a rail with the wake counter, whose instance
        has its socket bound. Asked before each look: a socket bound meanwhile counts."""
        return not follower and wakes is not None and self.wake is not None and self.wake.listening

    def _wal_may_have_changed(self) -> bool:
        """Cheap gate for the cross-process poll: did the WAL file's stat signature move?

        Another process's commit always rewrites the ``-wal`` file, so an unchanged (mtime,
        size, inode) means nothing was committed and the ``data_version`` round trip to the
        database thread (the costly part of an idle poll) can be skipped. One ``stat`` of a
        local file is a metadata lookup, cheap enough for the loop thread.
        """
        if self.db.path == ":memory:":
            return False  # one connection: every write is in-process and sets the event
        try:
            st = os.stat(self.db.path + "-wal")
            signature: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            signature = None
        changed = signature != self._wal_signature
        self._wal_signature = signature
        return changed


def _always() -> bool:
    return True


class _Seen:
    """A sleeper's look: the ``data_version`` and wake counter its read saw, then a sleep until
    another connection's commit concerns it (any commit, for a follower)."""

    __slots__ = ("_engine", "_follower", "_look")

    def __init__(self, engine: SqliteEngine, *, follower: bool) -> None:
        self._engine = engine
        self._follower = follower
        self._look: tuple[int, int | None] = (0, None)

    def stamp(self) -> None:
        """Note ``data_version`` and the wake counter (on the database thread, inside the
        read: the counter is the one of the read's snapshot)."""
        self._look = self._engine._look()

    async def sleep(self, event: anyio.Event, limit_s: float) -> None:
        """Until ``event``, another connection's commit that concerns this sleeper, or
        ``limit_s``."""
        engine = self._engine
        (engine._dv, engine._wakes), engine._dv_at = self._look, anyio.current_time()
        await engine._sleep_until_change(event, self._look, self._follower, limit_s)
