"""The core of ``EmbeddedTracker``: opening, the hand-off to the database thread, wake-ups.

Each operation hands one closure to the database thread (:mod:`.db`); writes run in one
``BEGIN IMMEDIATE`` transaction each, reads in one deferred transaction. Waiters in this process
are woken by the write itself, but only by a write that may make work claimable or revoke a
lease (not by claims, heartbeats, events, artifacts, the store, or a maintenance pass that found
nothing: those would make idle workers wake each other up). Writes of other processes are
noticed by polling ``PRAGMA data_version`` every ``poll_interval_s``. ``wait_for_work`` also
returns once the earliest live lease lapses, so an idle worker reclaims a dead worker's task
right after its lease expires instead of at its next back-off round. Followers of a task's
events (``follow_task``, :mod:`.follow`) wait on a second event that every write here sets
(events and claims included), so they never wake the workers' waiters.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any, Self, TypeVar

import anyio

from tracker_client.embedded.db import Database
from tracker_client.errors import ConfigError
from tracker_client.models import Health
from tracker_client.ops_models import MaintenanceReport, PurgeResult, WaitResult
from tracker_client.rules import backlog, retention, stats
from tracker_client.rules.common import Ctx, Options
from tracker_client.rules.options import parse_options
from tracker_client.rules.pipelines import PipelineCache
from tracker_client.rules.statements import Statements
from tracker_client.sweeps import SweepCounts

__all__ = ["TrackerCore"]

#: The SQLite engine's named statements (``tracker_client/embedded/sql/*.sql``).
STATEMENTS = Statements.load("tracker_client.embedded", "sqlite")

R = TypeVar("R")
Clock = Callable[[], int]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


#: Writes that never make work claimable nor revoke a lease: they do not wake waiters here.
QUIET_WRITES = frozenset(
    {"claim", "heartbeat", "add_event", "add_artifact", "store_put", "store_delete"}
    | {"store_delete_namespace", "purge", "vacuum"}
    | {"ingest_traces", "ingest_trace_blob"}
    | {"checkpoint", "claim_many"}
    | {"register_worker", "forget_worker"}
)
#: Purge batches one maintenance pass runs at most (the next pass goes on where it stopped).
MAINTENANCE_PURGE_BATCHES = 20
_DAY_MS = 86_400_000
#: ``wait_for_work`` returns this long after the earliest live lease's expiry, so that the claim
#: it prompts finds the lease lapsed by the tracker's clock.
LAPSE_MARGIN_S = 0.01
#: The earliest live lease expiry (the partial index ``tasks_leased`` answers it in O(log n)).
_NEXT_EXPIRY = "SELECT min(lease_expires_at_ms) FROM tasks WHERE lease_expires_at_ms > ?"


class TrackerCore:
    """Lifecycle, plumbing and the wait operations; the API is in :class:`EmbeddedTracker`."""

    def __init__(
        self, db: Database, opts: Options, clock: Clock, sweeps: SweepCounts | None = None
    ) -> None:
        self._db = db
        self._sweeps = sweeps if sweeps is not None else SweepCounts()
        self._opts = opts
        self._clock = clock
        self._pipelines = PipelineCache()
        self._rng = random.SystemRandom()
        self._changed = anyio.Event()
        self._waiters = 0
        self._written = anyio.Event()  # set by every write while someone follows a task
        self._followers = 0
        self._dv = 0
        self._dv_at = -1e18
        self._wal_signature: tuple[int, int, int] | None = None

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
        return cls(db, opts, clock or _wall_ms, sweeps)

    @property
    def path(self) -> str:
        """The database file (``:memory:`` for an in-memory tracker)."""
        return self._db.path

    @property
    def options(self) -> Options:
        """The effective options."""
        return self._opts

    async def aclose(self) -> None:
        """Close the database and stop its thread. Idempotent."""
        await self._db.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing -------------------------------------------------------------------------------
    def _ctx(self) -> Ctx:
        return Ctx(self._db.conn, 0, self._opts, self._pipelines, STATEMENTS)

    async def _write(self, where: str, fn: Callable[[Ctx], R]) -> R:
        ctx = self._ctx()

        def body() -> R:
            ctx.now = int(self._clock())
            ctx.logs.clear()
            ctx.swept = (0, 0)
            return fn(ctx)

        try:
            result = await self._db.run_write(body, where, ctx.flush_logs)
        except BaseException:
            if where not in QUIET_WRITES:
                self._notify()  # it may have committed before failing to answer
            self._wake_followers()
            raise
        if ctx.swept != (0, 0):
            self._sweeps.add(*ctx.swept)
        if where not in QUIET_WRITES and not _idle_maintenance(result):
            self._notify()
        self._wake_followers()
        return result

    async def _read(self, where: str, fn: Callable[[Ctx], R]) -> R:
        db = self._db

        def job() -> R:
            ctx = self._ctx()

            def body() -> R:
                ctx.now = int(self._clock())
                return fn(ctx)

            return db.read(body, where)

        return await db.run(job)

    def _notify(self) -> None:
        if self._waiters:
            event, self._changed = self._changed, anyio.Event()
            event.set()

    def _wake_followers(self) -> None:
        """Wake this instance's followers: any write may be an event or a state change of theirs."""
        if self._followers:
            event, self._written = self._written, anyio.Event()
            event.set()

    async def _sleep_until_change(self, event: anyio.Event, version: int, limit_s: float) -> None:
        """Until an in-process write sets ``event``, ``data_version`` moves, or ``limit_s``.

        The cross-process poll is a task of its own that sleeps between looks, beside one wait
        on ``event``: a timed wait per look (a cancel scope timing out every
        ``poll_interval_s``) cost an idle worker about three times the CPU (1.5 % of a core
        against 0.5 %, measured at the default 50 ms)."""
        error: Exception | None = None
        with anyio.move_on_after(limit_s):
            async with anyio.create_task_group() as tg:

                async def poll() -> None:
                    nonlocal error
                    try:
                        await self._poll_until_moved(version)
                    except Exception as exc:  # raised as it is, not in an exception group
                        error = exc
                    tg.cancel_scope.cancel()

                tg.start_soon(poll)
                await event.wait()
                tg.cancel_scope.cancel()
        if error is not None:
            raise error

    async def _poll_until_moved(self, version: int) -> None:
        """Return once another connection's commit moved ``data_version`` past ``version``.

        Each look comes after ``poll_interval_s`` +-25 % (uniform): processes polling one file
        do not fall into step, and neither does a periodic task of the same process (anyio's
        ``wait_all_tasks_blocked``, sleeping 0.1 s between looks, locked into phase with a
        fixed 0.05 s poll and always saw the poller's timer just fired, so it never returned).
        """
        while True:
            await anyio.sleep(self._opts.poll_interval_s * (0.75 + 0.5 * random.random()))
            # The stat gate can miss a same-size rewrite within one mtime tick, so a real
            # check still runs at least once a second.
            stale = anyio.current_time() - self._dv_at > 1.0
            if self._wal_may_have_changed() or stale:
                # Refresh the shared version: other waiters of this instance read it too,
                # since only the first to stat a change sees the signature move.
                self._dv = await self._db.run(self._db.data_version)
                self._dv_at = anyio.current_time()
            if self._dv != version:
                return

    def _wal_may_have_changed(self) -> bool:
        """Cheap gate for the cross-process poll: did the WAL file's stat signature move?

        Another process's commit always rewrites the ``-wal`` file, so an unchanged (mtime,
        size, inode) means nothing was committed and the ``data_version`` round trip to the
        database thread (the costly part of an idle poll) can be skipped. One ``stat`` of a
        local file is a metadata lookup, cheap enough for the loop thread.
        """
        if self._db.path == ":memory:":
            return False  # one connection: every write is in-process and sets the event
        try:
            st = os.stat(self._db.path + "-wal")
            signature: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            signature = None
        changed = signature != self._wal_signature
        self._wal_signature = signature
        return changed

    # -- lifecycle ------------------------------------------------------------------------------
    async def health(self) -> Health:
        """Tasks per stage and live leases."""
        return await self._read("health", stats.health)

    async def wait(self, task_id: str, *, timeout_s: float) -> WaitResult:
        """Block until the task is finished (terminal, dead-lettered, cancelled) or timeout."""
        deadline = anyio.current_time() + max(0.0, float(timeout_s))
        self._waiters += 1
        try:
            while True:
                event = self._changed

                def check(c: Ctx) -> tuple[int, WaitResult]:
                    version = self._db.data_version()
                    return version, backlog.finished_state(c, task_id)

                version, result = await self._read("wait", check)
                self._dv, self._dv_at = version, anyio.current_time()
                remaining = deadline - anyio.current_time()
                if result.finished or remaining <= 0:
                    return result
                await self._sleep_until_change(event, version, remaining)
        finally:
            self._waiters -= 1

    async def maintenance(self) -> MaintenanceReport:
        """Reclaim expired leases, dead-letter expired and crash-looping tasks, purge old keys,
        and purge finished tasks older than ``retention_days`` (a bounded number of small
        batches per pass; see :mod:`.retention`)."""
        report = await self._write("maintenance", backlog.maintenance)
        days = self._opts.retention_days
        if days <= 0:
            return report
        purged = await retention.purge(
            self._read,
            self._write,
            cutoff_ms=int(self._clock()) - days * _DAY_MS,
            max_batches=MAINTENANCE_PURGE_BATCHES,
        )
        return report.model_copy(update={"purged_tasks": purged.tasks})

    async def purge(
        self, *, older_than_ms: int, dry_run: bool = False, pipeline_id: str | None = None
    ) -> PurgeResult:
        """Purge finished tasks last updated more than ``older_than_ms`` ago (with their runs,
        events, artifact records, links and idempotency records), in small transactions, then
        vacuum the freed pages; ``dry_run`` only counts. Waiting and running work, and a
        finished task an unfinished one depends on, are never purged."""
        age = retention.check_age(older_than_ms)
        return await retention.purge(
            self._read,
            self._write,
            cutoff_ms=int(self._clock()) - age,
            pipeline_id=pipeline_id,
            dry_run=bool(dry_run),
        )

    async def wait_for_work(self, timeout_s: float) -> None:
        """Return early when something was written that may make work (here: see the module
        docstring; another process: any commit), or when the earliest live lease lapses (its
        task is claimable again), else on timeout."""
        self._waiters += 1
        try:
            event = self._changed
            db = self._db
            now_ms = int(self._clock())

            def look() -> tuple[int, int | None]:
                row = db.conn.execute(_NEXT_EXPIRY, (now_ms,)).fetchone()
                return db.data_version(), (row[0] if row is not None else None)

            version, next_expiry_ms = await db.run(look)
            self._dv, self._dv_at = version, anyio.current_time()
            limit = max(0.0, float(timeout_s))
            if next_expiry_ms is not None:
                limit = min(limit, (next_expiry_ms - now_ms) / 1000 + LAPSE_MARGIN_S)
            await self._sleep_until_change(event, version, limit)
        finally:
            self._waiters -= 1


def _idle_maintenance(result: object) -> bool:
    """Whether ``result`` is a maintenance report of a pass that changed nothing claimable."""
    return isinstance(result, MaintenanceReport) and not (
        result.expired_leases or result.expired_tasks or result.crash_looped
    )
