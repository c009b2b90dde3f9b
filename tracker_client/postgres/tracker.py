"""``PostgresTracker``: the :class:`~tracker_client.protocol.Tracker` on a PostgreSQL schema.

It is the embedded rail's API and rules (it subclasses
:class:`~tracker_client.embedded.EmbeddedTracker`, so every operation runs the same domain
function, with one source for docs/guarantees/backlog.md) over a different core: each operation's
transaction runs on a pooled psycopg connection (:mod:`.db`), each statement PostgreSQL's own
(``postgres/sql``, run by :mod:`.dialect`). What PostgreSQL does differently is here: the
claim (one statement, ``FOR UPDATE SKIP LOCKED``, :mod:`.claims`), the store search
(``tsvector``), wake-ups (``LISTEN/NOTIFY``, :mod:`.wake`; followers of a task's events on a
channel of their own, :mod:`.follow`), span inserts (:mod:`.spans`) and the declared
capabilities.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Self, TypeVar, cast

import anyio

from tracker_client.capabilities import Capabilities
from tracker_client.contract import table as contract
from tracker_client.embedded.core import QUIET_WRITES, _idle_maintenance, _wall_ms
from tracker_client.embedded.tracker import EmbeddedTracker
from tracker_client.errors import ConfigError, Unsupported
from tracker_client.models import Health, Lease, StoreEntry
from tracker_client.ops_models import WaitResult
from tracker_client.postgres import claims, idle, search
from tracker_client.postgres.batch import PgFinishManyOps
from tracker_client.postgres.db import Database
from tracker_client.postgres.dialect import STATEMENTS, PgConn
from tracker_client.postgres.follow import FOLLOW_QUIET, PgFollowOps, follow_channel, notify_sql
from tracker_client.postgres.options import PgOptions, parse_postgres_url
from tracker_client.postgres.spans import PgSpanOps
from tracker_client.postgres.wake import Listener, channel_name
from tracker_client.rules import backlog
from tracker_client.rules.claims import reissue
from tracker_client.rules.common import Ctx
from tracker_client.rules.idempotency import idempotent
from tracker_client.rules.leasekeys import stored_rail_key
from tracker_client.rules.options import parse_options
from tracker_client.rules.pipelines import PipelineCache
from tracker_client.sweeps import SweepCounts

__all__ = ["MISSING_EXTENSIONS", "POSTGRES", "PostgresTracker"]

R = TypeVar("R")
Clock = Callable[[], int]

#: Extensions of the contract this rail does not serve yet (none now: spans, workers and follow
#: arrived after the rail); ``call`` answers ``Unsupported`` for their operations.
MISSING_EXTENSIONS: frozenset[str] = frozenset()

#: The PostgreSQL rail: the embedded rail's rules, over a network connection (an answer can be
#: lost between the commit and the reply, so callers send idempotency keys).
POSTGRES = Capabilities(
    answers_can_be_lost=True,
    max_lease_ttl_ms=None,
    backlog_ops=True,
    wait=True,
    run_details=True,
    task_extensions=True,
    release=True,
    strict_definitions=True,
    strict_limits=True,
    extensions=frozenset(contract.EXTENSIONS) - MISSING_EXTENSIONS,
)

VERSION = "backlog-worker-postgres/1"
#: Writes that run beside each other (the write lock in shared mode; every other write takes it
#: alone): claims (see .claims) and the lease's own writes, which lock and touch only their
#: task's row and run; a write they may not make shared (a dead letter, fan-in edges: a
#: statement without the ``shared`` hint, see :mod:`.dialect`) sends them round again alone.
SHARED_WRITES = frozenset(
    {"claim", "claim_many", "heartbeat", "add_event", "transition", "fail", "finish", "release"}
)
#: A waiter with a live wake-up listener still looks this often (a lost NOTIFY costs no more).
SAFETY_TICK_S = 5.0
#: How long the first waiter waits for ``LISTEN`` to be in place before it polls instead.
LISTEN_START_S = 5.0


class PostgresTracker(
    PgFollowOps,
    idle.PgIdleOps,
    PgSpanOps,
    PgFinishManyOps,
    claims.PgClaimManyOps,
    EmbeddedTracker,
):
    """The PostgreSQL rail. Open it with ``await PostgresTracker.open("postgresql://...")``."""

    _db: Database  # type: ignore[assignment]

    def __init__(
        self,
        db: Database,
        opts: Any,
        clock: Clock,
        pg: PgOptions,
        sweeps: SweepCounts | None = None,
    ) -> None:
        super().__init__(cast(Any, db), opts, clock, sweeps)
        self._pg = pg
        self._channel = channel_name(pg.schema)
        self._instance = secrets.token_hex(8)
        self._listener: Listener | None = None
        # Channel and instance are hex names of ours: safe to spell in the statement.
        self._notify_sql = f"SELECT pg_notify('{self._channel}', '{self._instance}');"
        self._follow_channel = follow_channel(pg.schema)
        self._follow_sql = notify_sql(self._follow_channel, self._instance)

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        clock: Clock | None = None,
        sweeps: SweepCounts | None = None,
        **options: Any,
    ) -> Self:
        """Open (creating the schema and migrating if needed) the rail ``path`` names.

        ``path`` is a ``postgresql://`` URL (see :mod:`.options`); ``options`` add to its query.
        ``sweeps``: where every committed sweep of expired leases is counted
        (:mod:`tracker_client.sweeps`).
        ``ConfigError`` for a bad option, ``TrackerUnavailable`` when the server can't be
        reached, ``TrackerCorrupt`` for a schema that is not ours or is newer.
        """
        if clock is not None and not callable(clock):
            raise ConfigError("postgresql tracker option clock: must be a callable returning ms")
        conninfo, pg, shared, shown = parse_postgres_url(path, dict(options))
        opts = parse_options(shared)
        db = await Database.open(
            conninfo,
            schema=pg.schema,
            shown=shown,
            pool_size=pg.pool_size,
            statement_timeout_ms=pg.statement_timeout_ms,
            migrate=pg.migrate,
        )
        tracker = cls(db, opts, clock or _wall_ms, pg, sweeps)
        # The one-statement claim derives a keyed claim's token before it is sent: read once.
        tracker._rail_key = await tracker._read("rail_key", stored_rail_key)
        return tracker

    async def aclose(self) -> None:
        """Stop the wake-up listener and close every connection. Idempotent."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await anyio.to_thread.run_sync(listener.stop())
        await super().aclose()

    @property
    def path(self) -> str:
        """The rail's URL, without a password."""
        return self._db.shown

    async def capabilities(self) -> Capabilities:
        """The embedded rail's capabilities minus the extensions not here yet; answers over a
        network can be lost, so callers send idempotency keys."""
        return POSTGRES

    # -- plumbing -------------------------------------------------------------------------------
    def _pg_ctx(self, conn: PgConn) -> Ctx:
        # The domain functions only call execute() and in_transaction on their connection.
        return Ctx(
            cast(sqlite3.Connection, conn),
            int(self._clock()),
            self._opts,
            self._pipelines,
            STATEMENTS,
        )

    async def _write(self, where: str, fn: Callable[[Ctx], R]) -> R:
        """Run ``fn`` in a write transaction (a claim: beside other claims, see .claims)."""
        box: list[Ctx] = []

        def body(conn: PgConn) -> R:
            ctx = self._pg_ctx(conn)
            box[:] = [ctx]
            result = fn(ctx)
            if where not in QUIET_WRITES and not _idle_maintenance(result):
                # Delivered at commit, to every host's listener (see .wake).
                conn.before_commit.append(self._notify_sql)
            if where not in FOLLOW_QUIET:
                conn.before_commit.append(self._follow_sql)  # followers of every host
            return result

        try:
            result = await self._db.run(body, where, write=True, shared=where in SHARED_WRITES)
        except BaseException:
            if where not in QUIET_WRITES:
                self._notify()  # it may have committed before failing to answer
            if where == "create_pipeline":
                self._pipelines = PipelineCache()  # a rolled-back create may be cached
            self._wake_followers()
            raise
        if box:
            box[0].flush_logs()
            if box[0].swept != (0, 0):
                self._sweeps.add(*box[0].swept)
        if where not in QUIET_WRITES and not _idle_maintenance(result):
            self._notify()
        self._wake_followers()
        return result

    async def _read(self, where: str, fn: Callable[[Ctx], R]) -> R:
        return await self._db.run(lambda conn: fn(self._pg_ctx(conn)), where, write=False)

    # -- what PostgreSQL does its own way -------------------------------------------------------
    async def claim(
        self,
        agent_id: str,
        role: str,
        lease_ttl_ms: int,
        *,
        per_state: Mapping[str, int] | None = None,
        idempotency_key: str | None = None,
    ) -> Lease | None:
        """Claim the best eligible task of ``role``: one statement (see :mod:`.claims`)."""
        limits = dict(per_state or {})
        args = [agent_id, role, lease_ttl_ms, limits]
        fast = await self._one_trip_claim(
            "claim", agent_id, role, lease_ttl_ms, 1, limits, idempotency_key, args
        )
        if fast is not None:  # one round trip (see .claims)
            self._remember(fast)
            if not fast:
                await self._claimed_short()
            return fast[0] if fast else None

        def op(c: Ctx) -> Lease | None:
            return idempotent(
                c,
                idempotency_key,
                "claim",
                [agent_id, role, lease_ttl_ms, limits],
                lambda: claims.claim(c, agent_id, role, lease_ttl_ms, limits, idempotency_key),
                lambda lease: (
                    {"lease_id": lease.lease_id, "run_id": lease.run_id} if lease else None
                ),
                lambda rec: reissue(c, rec["lease_id"], rec["run_id"], idempotency_key),
            )

        lease = await self._write("claim", op)
        if lease is not None:
            self._remember([lease])  # its transition can take one round trip (see .hot)
        else:
            await self._claimed_short()
        return lease

    async def health(self) -> Health:
        """Tasks per stage and live leases; ``TrackerUnavailable`` when the server is down."""
        found = await super().health()
        return found.model_copy(update={"version": VERSION})

    async def store_search(
        self,
        query: str,
        *,
        namespace: str | None = None,
        limit: int = 10,
        filter_path: str | None = None,
        filter_value: str | None = None,
    ) -> list[StoreEntry]:
        """Full-text search: every word must match (as a phrase); rank order."""
        return await self._read(
            "store_search",
            lambda c: search.search(c, query, namespace, limit, filter_path, filter_value),
        )

    async def _tick(self, wait_s: float | None = None) -> float:
        """How long a waiter may sleep without looking: the slow safety tick while the
        wake-up listener is up (started here on first use), else the poll interval. A ``wait``
        of up to ``wait_s`` keeps this instance's ``waiters`` row alive (see :mod:`.idle`;
        a short tick just after it was written)."""
        listener = self._listener
        if listener is None:
            listener = self._listener = Listener(
                self._db.conninfo, self._channel, self._instance, self._notify
            )
            await anyio.to_thread.run_sync(listener.wait_listening, LISTEN_START_S)
        fresh = wait_s is not None and await self._wait_interest(wait_s)
        if not listener.healthy:
            return self._opts.poll_interval_s
        return idle.FRESH_TICK_S if fresh else SAFETY_TICK_S

    async def wait(self, task_id: str, *, timeout_s: float) -> WaitResult:
        """Block until the task is finished (terminal, dead-lettered, cancelled) or timeout."""
        deadline = anyio.current_time() + max(0.0, float(timeout_s))
        self._waiters += 1
        try:
            while True:
                # Before the look: a write committed after the row is seen notifies.
                tick = await self._tick(deadline - anyio.current_time())
                event = self._changed
                result = await self._read("wait", lambda c: backlog.finished_state(c, task_id))
                remaining = deadline - anyio.current_time()
                if result.finished or remaining <= 0:
                    return result
                with anyio.move_on_after(min(remaining, tick)):
                    await event.wait()
        finally:
            self._waiters -= 1

    async def wait_for_work(self, timeout_s: float) -> None:
        """Return early when a write here may have made work, when the earliest live lease
        lapses, else after ``timeout_s``."""
        self._waiters += 1
        try:
            tick = await self._tick()
            event = self._changed
            now_ms = int(self._clock())
            next_expiry = await self._read(
                "wait_for_work",
                lambda c: c.scalar("wait.next_expiry", (now_ms,)),
            )
            limit = min(max(0.0, float(timeout_s)), tick)
            if next_expiry is not None:
                limit = min(limit, (int(next_expiry) - now_ms) / 1000 + 0.01)
            with anyio.move_on_after(limit):
                await event.wait()
        finally:
            self._waiters -= 1


def _not_here_yet(name: str, extension: str) -> Callable[..., Awaitable[Any]]:
    async def method(self: PostgresTracker, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported(f"the PostgreSQL rail has no {extension} extension yet ({name})")

    method.__name__ = name
    method.__doc__ = f"``Unsupported``: the {extension} extension is not on this rail yet."
    return method


# The operations of the missing extensions answer Unsupported however they are reached (a
# served rail's routes call the method by name, not through ``call``): 501 over HTTP.
for _op in contract.OPERATIONS:
    if _op.extension in MISSING_EXTENSIONS:
        setattr(PostgresTracker, _op.name, _not_here_yet(_op.name, _op.extension))
