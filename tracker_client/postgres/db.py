"""The PostgreSQL rail's connections: a psycopg pool, one transaction per operation, errors.

Every operation borrows a pooled connection on a worker thread (``anyio.to_thread``; the domain
functions are synchronous), runs in one transaction and gives the connection back; the hot
path's one-statement calls (:meth:`Database.one_call`) run on the event loop instead, on async
connections of their own (:mod:`.aio`). A write
first takes the rail's write lock, ``pg_advisory_xact_lock`` on the schema's name: writes of
every host are serialised as the embedded rail's ``BEGIN IMMEDIATE`` serialises processes, which
keeps the rules that read before they write (backlog caps, concurrency keys, dedupe, rate
limits) exact. The hot path (claims and a lease's own writes) takes it in shared mode instead,
beside each other, each locking its task's row (see ``run``). Reads run ``REPEATABLE READ
READ ONLY`` (one snapshot) and take no lock.

psycopg's exceptions become the tracker's here, once: a dropped connection or an unreachable
server is ``TrackerUnavailable``, a statement timeout too (code ``timeout``: the transaction was
rolled back, nothing half-granted), an out-of-range value ``ValidationFailed``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import anyio
import psycopg
import psycopg_pool

from tracker_client.errors import (
    ConfigError,
    TrackerError,
    TrackerRejected,
    TrackerUnavailable,
    ValidationFailed,
)
from tracker_client.postgres import aio
from tracker_client.postgres.dialect import (
    NeedExclusive,
    NeedsTrip,
    OneTrip,
    PgConn,
    Prepared,
    configure_types,
    row_factory,
    row_maker,
)
from tracker_client.postgres.migrate import open_schema
from tracker_client.postgres.options import own_option_hint

__all__ = ["Database", "NeedExclusive", "map_pg_error"]

_BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
#: What sends a shared-mode write round again holding the lock alone: a write it may not make
#: shared (:class:`NeedExclusive`), a unique key another write took first (a concurrency key
#: leased twice, one idempotency key), a deadlock between row locks, and a refusal (a lost
#: lease, a conflict): alone, the operation answers as the embedded rail would (a replayed
#: idempotency key, say, whose first call was still running), and a refusal writes nothing.
_RUN_ALONE = (
    NeedExclusive,
    psycopg.errors.UniqueViolation,
    psycopg.errors.DeadlockDetected,
    TrackerError,
)

#: The SQLSTATE a hot-path function raises for what it leaves to the embedded path.
DECLINED = "BW001"

#: The SQLSTATE of ``bw_backlog_check`` (schema 18) refusing a create at a role's backlog cap.
BACKLOG_FULL = "BW002"

#: What else a hot-path function's transaction may meet that the embedded path answers
#: exactly (run alone if need be): a unique key a concurrent write took first, a deadlock.
_DECLINES = (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected)

T = TypeVar("T")


def map_pg_error(exc: BaseException, where: str) -> BaseException:
    """The tracker error for a psycopg/pool exception raised doing ``where``; others unchanged."""
    if isinstance(exc, TrackerError) or not isinstance(
        exc, psycopg.Error | psycopg_pool.PoolTimeout | psycopg_pool.PoolClosed
    ):
        return exc
    err: TrackerError
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    full = _backlog_full(exc)
    if full is not None:
        err = full
    elif isinstance(exc, psycopg.errors.InsufficientPrivilege):  # SQLSTATE 42501: a grant missing
        err = TrackerRejected(
            f"{where}: the PostgreSQL role lacks a privilege ({text}); grant it as"
            " docs/operate/security.md lists for a runtime role",
            code="permission_denied",
        )
    elif isinstance(exc, psycopg.errors.QueryCanceled):
        err = TrackerUnavailable(f"{where}: statement timeout ({text})", code="timeout")
    elif isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        err = TrackerUnavailable(f"{where}: conflicting transaction ({text})", code="busy")
    elif isinstance(exc, psycopg.DataError):
        err = ValidationFailed(f"{where}: invalid argument ({text})")
    elif isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        err = TrackerUnavailable(f"{where}: PostgreSQL unavailable ({text})", code="unavailable")
    elif isinstance(exc, psycopg_pool.PoolClosed):
        err = TrackerUnavailable("the PostgreSQL tracker is closed", code="closed")
    else:
        err = TrackerUnavailable(f"{where}: PostgreSQL error ({text})", code="postgres_error")
    err.__cause__ = exc
    return err


class Database:
    """A pool of connections to one rail (a schema of one PostgreSQL database)."""

    def __init__(
        self,
        pool: psycopg_pool.ConnectionPool[Any],
        schema: str,
        shown: str,
        conninfo: str,
        lane: aio.Lane | None = None,
        *,
        session_sql: str = "",
    ) -> None:
        self.pool = pool
        #: Behind a PgBouncer in transaction mode (``pgbouncer=transaction``): no session
        #: state; each transaction sets its own ``search_path`` and ``statement_timeout``
        #: (``session_sql``) and :meth:`one_call` declines (its statement is prepared).
        self.bouncer = bool(session_sql)
        #: The hot path's async connections (see :mod:`.aio`); None: every call on the pool.
        self.lane = lane
        #: libpq's connection string.
        self.conninfo = conninfo
        #: The wake-up listeners' connection string (:mod:`.wake`): the rail's own, the server
        #: itself behind a PgBouncer (``listen_host``/``listen_port``), or None: no listener,
        #: waiters poll (see :class:`~tracker_client.postgres.options.PgOptions`).
        self.listen_conninfo: str | None = conninfo
        self.schema = schema
        #: The URL without credentials (for messages and ``tracker.path``).
        self.shown = shown
        self.lock_name = f"backlog-worker:write:{schema}"
        # The schema is a checked identifier; the literal is quoted by psycopg all the same.
        key = f"hashtextextended({psycopg.sql.quote(self.lock_name)}, 0)"
        self._begin_read = _BEGIN_READ + session_sql
        #: The write lock: plain after ``BEGIN`` on the pool, prepared once per lane
        #: connection in a create's one round trip (:class:`~.dialect.OneTrip`).
        self._trip_lock = Prepared(
            name="_bw_write_lock",
            query=f"SELECT pg_advisory_xact_lock({key})",
            plain=f"SELECT pg_advisory_xact_lock({key});",
            execute="EXECUTE _bw_write_lock;",
        )
        self._begin_write = f"BEGIN;{session_sql} {self._trip_lock.plain}"
        self._begin_shared = f"BEGIN;{session_sql} SELECT pg_advisory_xact_lock_shared({key});"
        self._closed = False

    @classmethod
    async def open(
        cls,
        conninfo: str,
        *,
        schema: str,
        shown: str,
        pool_size: int,
        statement_timeout_ms: int,
        connect_timeout_s: float = 10.0,
        migrate: str = "auto",
        bouncer: bool = False,
    ) -> Database:
        """Open the pool after checking the schema's version, migrating a schema that is behind
        (under the advisory lock) when ``migrate`` is ``auto``
        (:func:`~tracker_client.postgres.migrate.open_schema`).

        ``bouncer``: the conninfo names a PgBouncer in transaction pooling mode, which
        refuses the ``options`` startup parameter and hands each transaction whichever server
        connection is free: the settings travel with each ``BEGIN`` (``SET LOCAL``), psycopg
        prepares nothing (``prepare_threshold=None``) and the async lane stays shut."""
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, int(connect_timeout_s)),
        }
        # JIT off: the rail's statements are short, and a read the planner costs above
        # jit_above_cost (queue_stats' waiting tasks, once the tasks are analyzed as many) was
        # compiled at every call: ~50-90 ms of the server's CPU for a ~4 ms read.
        session_sql = ""
        if bouncer:
            kwargs["prepare_threshold"] = None
            session_sql = (
                f" SET LOCAL search_path TO {schema};"
                f" SET LOCAL statement_timeout = {statement_timeout_ms}; SET LOCAL jit = off;"
            )
        else:
            kwargs["options"] = (
                f"-c search_path={schema} -c statement_timeout={statement_timeout_ms} -c jit=off"
            )
        try:
            given = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:  # libpq's message ends in a newline
            hint = own_option_hint(conninfo)
            raise ConfigError(f"tracker url {shown!r}: {str(exc).strip()}{hint}") from None
        if "application_name" not in given:
            kwargs["application_name"] = "backlog-worker"

        def configure(conn: Any) -> None:
            configure_types(conn)
            conn.row_factory = row_factory

        # pool_size bounds the process's connections: the hot path's async lane takes half.
        lane_size = 0 if bouncer else max(1, pool_size // 2)
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(1, pool_size - lane_size),
            kwargs=kwargs,
            configure=configure,
            open=False,
            timeout=connect_timeout_s,
            name=f"backlog-rail:{schema}",
        )

        def start() -> None:
            try:
                # One direct connection first: an unreachable server fails at once with
                # libpq's own reason (the pool would retry until its timeout).
                with psycopg.connect(conninfo, **kwargs) as conn:
                    open_schema(conn, schema, migrate)
                pool.open(wait=True, timeout=connect_timeout_s)
            except BaseException as exc:
                pool.close()
                err = map_pg_error(exc, f"opening {shown}")
                if "unsupported startup parameter" in str(exc):
                    err = ConfigError(
                        f"opening {shown}: the server refused the startup parameter 'options'"
                        " (a PgBouncer? add ?pgbouncer=transaction to the URL, see"
                        " docs/operate/postgresql.md)"
                    )
                if isinstance(exc, psycopg_pool.PoolTimeout):
                    err = TrackerUnavailable(
                        f"opening {shown}: no connection to PostgreSQL within "
                        f"{connect_timeout_s:g} s (is the server up and the URL right?)",
                        code="unavailable",
                    )
                if err is exc:
                    raise
                raise err from exc

        await anyio.to_thread.run_sync(start)
        if bouncer:
            return cls(pool, schema, shown, conninfo, None, session_sql=session_sql)
        return cls(pool, schema, shown, conninfo, aio.Lane(conninfo, kwargs, lane_size, configure))

    def _check(self) -> None:
        if self._closed:
            raise TrackerUnavailable("the PostgreSQL tracker is closed", code="closed")

    async def run(
        self, fn: Callable[[PgConn], T], where: str, *, write: bool, shared: bool = False
    ) -> T:
        """Run ``fn`` in one transaction on a pooled connection (``write``: under the lock).

        ``shared`` (claims, a lease's writes): the write lock in shared mode, so they run at
        once on every host and only other writes wait; what they may not do shared raises
        :class:`NeedExclusive` (a statement without the ``shared`` hint, see
        :mod:`.dialect`) and, as a unique-key clash, a deadlock or a refusal does
        (:data:`_RUN_ALONE`), sends them round again holding the lock exclusively.

        The pooled connections are in autocommit mode and the transaction is spelled out:
        ``BEGIN`` and the lock travel with the first statement, and ``COMMIT`` with the writes
        whose answer nobody reads and what ``fn`` queued to run just before it
        (``PgConn.before_commit``: the wake-up ``NOTIFY``), one round trip each.
        """
        self._check()

        def attempt(begin: str, is_shared: bool) -> T:
            with self.pool.connection() as raw:
                conn = PgConn(raw, shared=is_shared, write=write, begin=begin)
                try:
                    result = fn(conn)
                    raw.execute(conn.commit_sql())
                except BaseException:
                    idle = psycopg.pq.TransactionStatus.IDLE
                    if not raw.closed and raw.info.transaction_status != idle:
                        with contextlib.suppress(psycopg.Error):
                            raw.execute(b"ROLLBACK")
                    raise
                return result

        def job() -> T:
            try:
                if not write:
                    return attempt(self._begin_read, False)
                if shared:
                    try:
                        return attempt(self._begin_shared, True)
                    except _RUN_ALONE:
                        pass
                return attempt(self._begin_write, False)
            except BaseException as exc:
                err = map_pg_error(exc, where)
                if err is exc:
                    raise
                raise err from exc

        return await anyio.to_thread.run_sync(job)

    async def one_trip_write(
        self,
        fn: Callable[[PgConn], T],
        where: str,
        versions: Callable[[str], int | None] | None = None,
        declined: Callable[[], None] | None = None,
    ) -> tuple[bool, T | None]:
        """``fn`` gathered whole (:class:`~.dialect.OneTrip`: only deferred statements) and
        sent as ONE round trip under the write lock (exclusive) on the event loop (the async
        lane, :mod:`.aio`): ``(True, its answer)``, or ``(False, None)`` when it can't be (a
        statement whose answer is read, no lane, not asyncio, behind a PgBouncer): nothing
        was sent, the caller runs it with :meth:`run`. What ``fn`` raises is raised (nothing
        sent), as is the commit's error, mapped (:func:`map_pg_error`: a create refused at its
        backlog cap is ``BacklogFull``), the transaction rolled back. ``versions``: the
        pipeline versions the process knows (:class:`~.dialect.OneTrip`); a commit that
        declined (SQLSTATE ``BW001``: a pipeline moved on; or a clash, :data:`_DECLINES`)
        rolled back, calls ``declined`` and answers ``(False, None)``."""
        self._check()
        lane = self.lane
        if lane is None or self.bouncer or not aio.usable():
            return False, None
        lock = self._trip_lock

        async def job(conn: psycopg.AsyncConnection[Any]) -> tuple[bool, Any, BaseException | None]:
            gathered = OneTrip(conn, lock, versions)
            try:
                result = fn(gathered)
            except NeedsTrip:
                return False, None, None
            except Exception as exc:  # nothing was sent: the connection stays usable
                return True, None, exc
            try:
                await aio.prepare_once(conn, gathered.prepared)
                await aio.simple_query(conn, gathered.commit_sql())
            except psycopg.Error as exc:
                idle = psycopg.pq.TransactionStatus.IDLE
                if not conn.closed and conn.info.transaction_status != idle:
                    with contextlib.suppress(psycopg.Error):
                        await conn.execute(b"ROLLBACK", prepare=False)
                return True, None, exc
            return True, result, None

        try:
            served, found = await lane.run(job)
        except BaseException as exc:
            err = map_pg_error(exc, where)
            if err is exc:
                raise
            raise err from exc
        if not served or not found[0]:
            return False, None
        _, result, failed = found
        if failed is not None and _declined(failed):
            if declined is not None:
                declined()
            return False, None
        if failed is not None:
            err = map_pg_error(failed, where)
            if err is failed:
                raise failed
            raise err from failed
        return True, cast(T, result)

    async def one_call(self, call: str, params: Sequence[Any], where: str) -> list[Any] | None:
        """``call``, one prepared statement of a hot-path function that takes the write lock
        (shared) and sends its wake-ups itself (schema 9's ``bw_*_tx``), in its own implicit
        transaction: ONE round trip, nothing for the server to parse or plan after the first
        time on a connection. Returns its rows, or None when it declined (raised SQLSTATE
        ``BW001``, or met :data:`_DECLINES`: rolled back, nothing written); nothing is retried
        here. On asyncio it runs on the event loop (the async lane, :mod:`.aio`), else on a
        pool thread. Behind a PgBouncer in transaction mode it always declines: a prepared
        statement lives on one server connection, and 1.18 does not track them."""
        self._check()
        if self.bouncer:
            return None
        lane = self.lane
        try:
            if lane is not None and aio.usable():
                served, found = await lane.run(lambda conn: _call_async(conn, call, params))
                if served:
                    return cast(list[Any] | None, found)

            def job() -> list[Any] | None:
                with self.pool.connection() as raw:
                    try:
                        found: list[Any] = raw.execute(call, params, prepare=True).fetchall()
                        return found
                    except psycopg.Error as exc:
                        if _declined(exc):
                            return None  # rolled back: the embedded path answers it
                        raise

            return await anyio.to_thread.run_sync(job)
        except BaseException as exc:
            err = map_pg_error(exc, where)
            if err is exc:
                raise
            raise err from exc

    async def aclose(self) -> None:
        """Close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.lane is not None:
            self.lane.close()
        await anyio.to_thread.run_sync(self.pool.close)


def _backlog_full(exc: BaseException) -> TrackerError | None:
    """The ``BacklogFull`` of a create the server refused at a role's cap (SQLSTATE
    :data:`BACKLOG_FULL`, the role, depth and cap as JSON in its DETAIL), else None."""
    if not isinstance(exc, psycopg.Error) or exc.sqlstate != BACKLOG_FULL:
        return None
    from tracker_client.rules.tasks import backlog_full

    try:
        found = json.loads(exc.diag.message_detail or "")
        return backlog_full(str(found["role"]), int(found["depth"]), int(found["cap"]))
    except (ValueError, TypeError, KeyError):
        return None  # not ours after all: reported as a PostgreSQL error


def _declined(exc: BaseException) -> bool:
    """Whether a hot-path function's error means "the embedded path answers it"."""
    return isinstance(exc, _DECLINES) or (
        isinstance(exc, psycopg.Error) and exc.sqlstate == DECLINED
    )


async def _call_async(
    conn: psycopg.AsyncConnection[Any], call: str, params: Sequence[Any]
) -> list[Any] | None:
    try:
        return await aio.prepared_call(conn, call, params, row_maker)
    except psycopg.Error as exc:
        if _declined(exc):
            return None  # rolled back (autocommit: the statement was its transaction)
        raise
