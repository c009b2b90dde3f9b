"""The database thread's parts: a job handed from the loop, the thread that runs jobs in groups,
and the checkpointer.

:class:`~tracker_client.embedded.db.Database` owns one of each per tracker instance; nothing
here touches tracker data (the closures do).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "MAX_GROUP",
    "STOP",
    "Checkpointer",
    "DbThread",
    "Job",
    "deliver",
    "ignore",
    "resolve_all",
]


class Job:
    """A closure for the database thread; a write job's ``fn`` runs inside a transaction.

    Its outcome goes to ``fut`` on ``loop`` (asyncio callers) or to ``done`` (any other caller).
    """

    __slots__ = ("after", "done", "fn", "fut", "loop", "together", "where", "write")

    def __init__(
        self,
        fn: Callable[[], Any],
        *,
        write: bool = False,
        where: str = "",
        after: Callable[[], None] | None = None,
    ) -> None:
        self.fn = fn
        self.write = write
        self.where = where
        self.after = after
        self.done: Callable[[bool, Any], None] = ignore
        self.loop: asyncio.AbstractEventLoop | None = None
        self.fut: asyncio.Future[Any] | None = None
        #: Write jobs to commit in one transaction (a carrier: :meth:`DbThread.submit_together`).
        self.together: list[Job] | None = None


def ignore(_ok: bool, _value: Any) -> None:
    """The callback of a job whose answer nobody awaits."""
    return None


def deliver(outcomes: list[tuple[Job, bool, Any]]) -> None:
    """Hand outcomes to their callers: one loop wake-up per event loop, not one per job."""
    batches: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for job, ok, value in outcomes:
        if job.loop is None or job.fut is None:
            job.done(ok, value)
        else:
            batches.setdefault(job.loop, []).append((job.fut, ok, value))
    for loop, batch in batches.items():
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            loop.call_soon_threadsafe(resolve_all, batch)


def resolve_all(batch: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    """Settle each future of ``batch`` with its value or exception (on the loop thread)."""
    for fut, ok, value in batch:
        if fut.done():
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


STOP = Job(lambda: None)

#: At most this many queued writes share one transaction (group commit).
MAX_GROUP = 64


class DbThread:
    """One daemon thread running jobs from a queue, in order.

    Writes queued back to back (several slots of one process) are handed to ``write_group``
    together, which commits them in one transaction: one commit, one lock round, one set of
    page writes for all of them.
    """

    def __init__(self, name: str, write_group: Callable[[list[Job]], None]) -> None:
        self._queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._write_group = write_group
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        pending: Job | None = None
        while True:
            job = pending if pending is not None else self._queue.get()
            pending = None
            if job is STOP:
                return
            if not job.write:
                try:
                    result = job.fn()
                except BaseException as exc:  # handed to the caller, never swallowed
                    deliver([(job, False, exc)])
                else:
                    deliver([(job, True, result)])
                continue
            group = [job] if job.together is None else list(job.together)
            # Only this thread takes from the queue, so a queue seen non-empty stays so (and
            # an empty one costs no raised queue.Empty per group).
            while len(group) < MAX_GROUP and not self._queue.empty():
                nxt = self._queue.get_nowait()
                if not nxt.write or nxt is STOP:
                    pending = nxt
                    break
                group.extend([nxt] if nxt.together is None else nxt.together)
            self._write_group(group)

    def submit(self, job: Job) -> None:
        """Queue ``job`` for the database thread."""
        self._queue.put(job)

    def submit_together(self, jobs: list[Job]) -> None:
        """Queue write ``jobs`` to be committed in one transaction, in this order (one put:
        the thread cannot start the group between them)."""
        carrier = Job(lambda: None, write=True, where=jobs[0].where)
        carrier.together = jobs
        self._queue.put(carrier)

    def stop(self) -> None:
        """Ask the thread to finish the queued jobs and exit."""
        self._queue.put(STOP)


def _restart_wal(conn: sqlite3.Connection) -> None:
    """Restart the WAL, every frame of which was just copied back: commit page 1 as it is
    (``user_version`` set to the value it has, in one write transaction), the first frame of
    the restarted WAL, whose header write and sync this thread pays instead of the next writer.
    The frame's page holds what the database file holds; it is copied back with the next
    checkpoint. Best effort: a failure leaves the restart to the next writer, as before."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error:
        return
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("COMMIT")
    except sqlite3.Error:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


class Checkpointer:
    """Checkpoints the WAL from its own connection and thread, so no commit pays for the fsyncs.

    The main connection runs with ``wal_autocheckpoint = 0``. The database thread tells this
    one of each commit (:meth:`committed`); a PASSIVE checkpoint (never blocks writers or
    readers) then runs a second after the first commit since the last one, so a second of
    commits shares it, and early after ``every`` commits so the WAL stays bounded under heavy
    load. Each checkpoint costs two fsyncs; doing one every few hundred commits (SQLite's
    default) cost a third of the commit time.

    A checkpoint that copied every frame back leaves the WAL to be restarted from its start by
    the next commit, which then writes a new WAL header and syncs it (SQLite does so whatever
    ``synchronous`` short of OFF says): ~0.3-0.45 ms on this project's machines, paid by the
    first write after a quiet second, typically the create of new work, on the pickup's path
    (docs/benchmarks/pickup.md). So the thread restarts it itself, at once, by
    committing a write that changes nothing (:func:`_restart_wal`), unless a commit came
    meanwhile (a busy rail); the next commit appends.

    With nothing committed since a checkpoint that copied every frame back, the thread sleeps
    until the next commit: no timer, no look at the database (it used to checkpoint every
    second, a quiet file included). A checkpoint a reader's snapshot held back (frames left in
    the WAL) is tried again every second until done, commits or not. The first one runs a
    second after the start, for frames an earlier process left. Another process's commits are
    its own checkpointer's; a checkpoint here copies back every frame in the WAL, theirs too,
    so a process that died before checkpointing has its frames copied back with the next
    commit of any process, or by the next process to open the file.
    """

    def __init__(self, path: str, busy_timeout_ms: int, every: int = 10_000) -> None:
        self._path = path
        self._busy = busy_timeout_ms
        self.every = every
        self._dirty = False  # a commit since the last checkpoint began
        self._first = threading.Event()  # the first commit after a complete checkpoint
        self._now = threading.Event()  # checkpoint without waiting out the second
        self._stop = False
        #: Checkpoints run, and the last one's answer: (busy, frames in the WAL, frames
        #: checkpointed), ``(1, -1, -1)`` when it failed (tests and benches read them).
        self.runs = 0
        self.last: tuple[int, int, int] | None = None
        self.thread = threading.Thread(
            target=self._main, name=f"backlog-checkpoint:{os.path.basename(path)}", daemon=True
        )
        self.thread.start()

    def committed(self, commits: int) -> None:
        """On the database thread, after a commit (``commits``: how many so far): the first
        since the last checkpoint wakes the thread, every ``every``-th asks for one now."""
        if not self._dirty:
            self._dirty = True
            self._first.set()
        if commits % self.every == 0:
            self._now.set()

    def poke(self) -> None:
        """Checkpoint now (not waiting out the second)."""
        self._dirty = True
        self._first.set()
        self._now.set()

    def stop(self) -> None:
        """Ask the checkpointer thread to exit (after a last checkpoint, if one is due)."""
        self._stop = True
        self._first.set()
        self._now.set()

    def _main(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            return
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy)}")
            behind = True  # frames an earlier process left: the first pass checkpoints
            while True:
                if not (behind or self._dirty or self._stop):
                    self._first.wait()  # nothing to checkpoint: asleep until a commit
                if not self._stop:
                    self._now.wait(1.0)
                self._now.clear()
                if behind or self._dirty:
                    # Before the checkpoint: a commit from here on is the next one's.
                    self._first.clear()
                    self._dirty = False
                    try:
                        row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        last = (int(row[0]), int(row[1]), int(row[2]))
                    except sqlite3.Error:
                        last = (1, -1, -1)
                    behind = last[0] != 0 or last[1] != last[2]
                    # Quiet since it began (no commit: under load the next one is moments
                    # away and restarts it, and the restart's write lock would be in its way),
                    # and more in the WAL than one frame, which may be a restart's own: each
                    # restart moves every other connection's data_version, whose processes'
                    # waiters then look (an empty look commits nothing, but tells their
                    # checkpointers), so restarting after that would go round for ever.
                    if not (behind or self._dirty or self._stop) and last[1] > 1:
                        _restart_wal(conn)
                    self.last = last
                    self.runs += 1
                if self._stop:
                    return
        finally:
            conn.close()
