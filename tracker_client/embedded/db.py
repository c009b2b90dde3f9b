"""The thread that owns the SQLite connection, transactions (with group commit), checkpoints.

Every statement runs on one dedicated thread per tracker instance (never on the event loop).
The loop hands it a closure and awaits a future; the thread runs closures one at a time, so the
connection is never used concurrently. A dedicated thread instead of ``anyio.to_thread.run_sync``
because its hand-off costs a third as much (~50 us vs ~140 us per call on a 2-core machine),
which matters at thousands of claims per second. On an event loop other than asyncio the hand-off
goes through ``anyio.to_thread`` to the same dedicated thread.

Opening and migrating the file is :mod:`.migrate`; foreign exceptions are mapped to the tracker's
errors by :mod:`.sqlerrors`, once, at this boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from tracker_client.embedded.dbthread import (
    Checkpointer,
    DbThread,
    Job,
    deliver,
)
from tracker_client.embedded.migrate import connect
from tracker_client.embedded.sqlerrors import is_busy, map_sqlite_error, mapped
from tracker_client.errors import TrackerUnavailable

__all__ = ["Database"]

T = TypeVar("T")

#: Scheduling passes a parked write (a ``finish_many``) waits for the next write to share its
#: transaction before it goes alone (the claim for the slots its runs freed comes within one
#: or two).
PARK_PASSES = 2
#: Passes between answering the parked write's caller and the write that took it along (see
#: :meth:`Database.run_write`).
SETTLE_PASSES = 2

#: The longest sleep between two tries of a busy database. Another process's write of a batch
#: of ten runs holds the lock ~0.3-1 ms; a poller that had backed off to 2 ms left the lock
#: idle for most of its sleep (two workers draining one file: ~14 % more tasks/s, ~5 % less
#: CPU per task with 0.2 ms); a try costs a few microseconds.
BUSY_POLL_MAX_S = 0.0002


class Database:
    """An open, checked, migrated SQLite connection owned by one thread."""

    def __init__(self, conn: sqlite3.Connection, path: str, worker: DbThread) -> None:
        self.conn = conn
        self.path = path
        self._worker = worker
        self._closed = False
        self._checkpointer: Checkpointer | None = None
        self._commits = 0
        self.busy_timeout_ms = 5000
        self._parked: Job | None = None
        #: Parked writes another write took along into its transaction, and those that went
        #: alone (for the tests and the benchmarks).
        self.paired = 0
        self.alone = 0

    # -- opening --------------------------------------------------------------------------------
    @classmethod
    async def open(cls, path: str, *, synchronous: str, busy_timeout_ms: int) -> Database:
        """Open (creating if needed) and migrate ``path`` on a fresh dedicated thread."""
        db = cls.__new__(cls)
        worker = DbThread(f"backlog-tracker:{os.path.basename(path)}", db._write_group)
        box: list[sqlite3.Connection] = []
        db._worker = worker
        db._closed = False
        db.path = path
        db._checkpointer = None
        db._commits = 0
        db.busy_timeout_ms = busy_timeout_ms
        db._parked = None
        db.paired = db.alone = 0
        try:
            await db._call(Job(lambda: box.append(connect(path, synchronous, busy_timeout_ms))))
        except BaseException:
            worker.stop()
            raise
        db.conn = box[0]
        db.busy_timeout_ms = busy_timeout_ms
        if path != ":memory:":
            db._checkpointer = Checkpointer(path, busy_timeout_ms)
        return db

    @property
    def thread_id(self) -> int:
        """The database thread's id (``threading``'s ident: benches read its CPU clock)."""
        ident = self._worker.thread.ident
        assert ident is not None  # started in the constructor
        return ident

    # -- running work ---------------------------------------------------------------------------
    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the database thread and return its result (errors re-raised)."""
        if self._closed:
            raise TrackerUnavailable("the embedded tracker is closed", code="closed")
        result: T = await self._call(Job(fn))
        return result

    async def run_write(
        self,
        fn: Callable[[], T],
        where: str,
        after: Callable[[], None] | None = None,
        *,
        park: bool = False,
    ) -> T:
        """Run ``fn`` in a write transaction on the database thread; ``after`` once committed.

        ``park``: the write waits up to :data:`PARK_PASSES` scheduling passes for the next
        write, and the two share one transaction (a worker's ``finish_many`` and the claim for
        the slots its runs freed, ready a pass or two apart: one commit instead of two, and one
        hand-off each way). The parked write is written first, so the next sees it; each keeps
        its own answer and errors (a job that fails after writing has the group written again
        one job per transaction: :meth:`_write_group`). The taker hears back
        :data:`SETTLE_PASSES` passes after the parked write's caller, so the reported runs
        count as finished before the claimed ones start. A write that no other joins goes
        alone, as it would have."""
        if self._closed:
            raise TrackerUnavailable("the embedded tracker is closed", code="closed")
        result: T = await self._call(Job(fn, write=True, where=where, after=after), park)
        return result

    async def _call(self, job: Job, park: bool = False) -> Any:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): hand over through anyio's thread pool
            loop = None
        if loop is None:
            self._release_parked()
            return await anyio.to_thread.run_sync(self._blocking_call, job)
        fut: asyncio.Future[Any] = loop.create_future()
        job.loop, job.fut = loop, fut
        # Like anyio.to_thread.run_sync: a started call always completes and its result is
        # delivered, so a cancelled caller never loses a committed claim half-way.
        with anyio.CancelScope(shield=True):
            parked, self._parked = self._parked, None
            if parked is not None and job.write:
                self.paired += 1
                self._worker.submit_together([parked, job])
                result = await fut
                for _ in range(SETTLE_PASSES):
                    await anyio.lowlevel.checkpoint()
                return result
            if parked is not None:
                self._worker.submit(parked)  # a read goes after it, as it came after it
            if park and PARK_PASSES > 0:
                self._parked = job
                for _ in range(PARK_PASSES):
                    await anyio.lowlevel.checkpoint()
                    if self._parked is not job:
                        break  # taken along (or released by a read, or by closing)
                else:
                    self._parked = None
                    self.alone += 1
                    self._worker.submit(job)
            else:
                self._worker.submit(job)
            return await fut

    async def run_writes(
        self, writes: Sequence[tuple[Callable[[], Any], str, Callable[[], None] | None]]
    ) -> list[tuple[bool, Any]]:
        """Run ``writes`` ((fn, where, after), as :meth:`run_write` takes them) in one
        transaction on the database thread, in this order, handed over as one job and
        answered with one wake-up of the loop: each one's outcome, ``(True, result)`` or
        ``(False, error)``, as if each had been its own :meth:`run_write` (a write that fails
        alone is rolled back alone: :meth:`_write_group`). A parked write goes first."""
        if self._closed:
            raise TrackerUnavailable("the embedded tracker is closed", code="closed")
        jobs = [Job(fn, write=True, where=where, after=after) for fn, where, after in writes]
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): one hand-off each, in order
            loop = None
        outcomes: list[tuple[bool, Any]] = []
        if loop is None:
            for job in jobs:
                try:
                    outcomes.append((True, await self._call(job)))
                except Exception as exc:
                    outcomes.append((False, exc))
            return outcomes
        futures: list[asyncio.Future[Any]] = []
        for job in jobs:
            job.loop, job.fut = loop, loop.create_future()
            futures.append(job.fut)
        # shielded as _call is: the writes handed over are written and answered
        with anyio.CancelScope(shield=True):
            parked, self._parked = self._parked, None
            if parked is not None:
                self.paired += 1
            self._worker.submit_together(jobs if parked is None else [parked, *jobs])
            for fut in futures:
                try:
                    outcomes.append((True, await fut))
                except Exception as exc:
                    outcomes.append((False, exc))
        return outcomes

    def _release_parked(self) -> None:
        """Send a parked write on alone (closing, or a caller that cannot take it along)."""
        parked, self._parked = self._parked, None
        if parked is not None:
            self.alone += 1
            self._worker.submit(parked)

    def _blocking_call(self, job: Job) -> Any:
        box: list[tuple[bool, Any]] = []
        ready = threading.Event()

        def done(ok: bool, value: Any) -> None:
            box.append((ok, value))
            ready.set()

        job.done = done
        self._worker.submit(job)
        ready.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value

    async def aclose(self) -> None:
        """Close the connection on its thread and stop the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._checkpointer is not None:
            self._checkpointer.stop()
            await anyio.to_thread.run_sync(self._checkpointer.thread.join)
        self._release_parked()  # written before the connection closes
        with contextlib.suppress(Exception):
            await self._call(Job(self.conn.close))
        self._worker.stop()
        await anyio.to_thread.run_sync(self._worker.thread.join)

    # -- transactions (called on the database thread) -------------------------------------------
    def _backoff(self, exc: sqlite3.Error, where: str, state: list[float]) -> None:
        """Sleep a little before retrying a busy database, or give up past the busy timeout.

        SQLite's own busy handler sleeps 1, 2, 5, 10, ... ms, far longer than our transactions
        (~0.1 ms), so several processes sharing a file would mostly sleep; this polls in
        50 us .. :data:`BUSY_POLL_MAX_S` steps with jitter instead.
        """
        if not is_busy(exc):
            raise map_sqlite_error(exc, where) from exc
        now = time.monotonic()
        if not state:
            state += [now + self.busy_timeout_ms / 1000, 0.00005]
        if now >= state[0]:
            raise TrackerUnavailable(
                f"{where}: database is busy (locked by another process for more than "
                f"{self.busy_timeout_ms} ms)",
                code="busy",
            ) from exc
        time.sleep(state[1] * (0.5 + random.random()))
        state[1] = min(state[1] * 2, BUSY_POLL_MAX_S)

    def _begin(self, where: str) -> None:
        state: list[float] = []
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.Error as exc:
                self._backoff(exc, where, state)

    def _committed(self) -> None:
        self._commits += 1
        if self._checkpointer is not None:
            self._checkpointer.committed(self._commits)

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")

    def write(self, fn: Callable[[], T], where: str) -> T:
        """Run ``fn`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``; roll back on any error."""
        self._begin(where)
        try:
            result = fn()
            self.conn.execute("COMMIT")
        except BaseException as exc:
            self._rollback()
            err = mapped(exc, where)
            if err is exc:
                raise
            raise err from exc
        self._committed()
        return result

    def _write_group(self, group: list[Job]) -> None:
        """Run write jobs in one transaction and commit once (group commit).

        A job that fails without having changed a row just gets its error; the others commit.
        A job that fails after writing can only be undone by a rollback, so then the whole group
        is rolled back and every job re-run in a transaction of its own (jobs are functions of
        the database state, safe to re-run; nothing of theirs happened outside it). Per-job
        savepoints would do the same, at two more statements per job on the common path.
        Each caller hears back only after the commit (or with the error that lost it).
        """
        conn = self.conn
        try:
            self._begin(group[0].where)
        except BaseException as exc:
            deliver([(job, False, exc) for job in group])
            return
        outcomes: list[tuple[Job, bool, Any]] = []
        replay = False
        try:
            for job in group:
                changes = conn.total_changes
                try:
                    value = job.fn()
                except BaseException as exc:
                    if not conn.in_transaction:  # SQLite gave up the whole transaction
                        raise
                    if conn.total_changes != changes and len(group) > 1:
                        replay = True
                        break
                    outcomes.append((job, False, mapped(exc, job.where)))
                else:
                    outcomes.append((job, True, value))
            if replay or not any(ok for _, ok, _ in outcomes):
                self._rollback()
            else:
                conn.execute("COMMIT")
                self._committed()
        except BaseException as exc:
            self._rollback()
            lost = mapped(exc, group[0].where)
            deliver([(job, False, lost) for job in group])
            return
        if replay:
            for job in group:
                self._write_group([job])
            return
        for job, ok, _ in outcomes:
            if ok and job.after is not None:
                with contextlib.suppress(Exception):
                    job.after()
        deliver(outcomes)

    def read(self, fn: Callable[[], T], where: str) -> T:
        """Run ``fn`` in a deferred (read) transaction, so multi-query reads are consistent."""
        conn = self.conn
        state: list[float] = []
        while True:
            try:
                conn.execute("BEGIN")
                try:
                    return fn()
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._backoff(exc, where, state)  # reads have no effects: safe to retry
            except (OSError, OverflowError) as exc:
                raise map_sqlite_error(exc, where) from exc

    def data_version(self) -> int:
        """``PRAGMA data_version``: changes when another connection commits."""
        try:
            return int(self.conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, "data_version") from exc
