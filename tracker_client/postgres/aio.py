"""The hot path's own connections: psycopg ``AsyncConnection`` s on the event loop itself.

The one-round-trip calls (claims, a plain transition: :meth:`.db.Database.one_trip`) are most of
a worker's traffic. On the pool (:mod:`.db`) each went through a worker thread: ``anyio``'s
hand-off, the pool's lock and condition, psycopg's blocking wait, the hand-back, a few hundred
microseconds of CPU per call against a round trip that costs less. Here they run on the event
loop (psycopg's async connection, waiting through the loop's reader), on a small set of
connections of their own, at most :attr:`Lane.size` at once (the rest queue). The
one-statement calls (:meth:`.db.Database.one_call`) go on libpq itself
(:func:`prepared_call`).

A lane belongs to one event loop (psycopg's async connection waits on the loop that runs it):
used from another loop while a call is in flight it answers None and the caller takes the
thread path; used from another loop later it drops its connections and opens new ones. Only
asyncio has psycopg's async support: elsewhere :func:`usable` is False. A connection that
failed, was cancelled mid-call or is left inside a transaction is closed, never reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

__all__ = ["Lane", "prepare_once", "prepared_call", "usable"]


def usable() -> bool:
    """Whether the running event loop is asyncio (psycopg's async connection needs it).

    Asked of anyio (the loop's token is the asyncio loop itself there, a trio token under
    trio), not of sniffio: no extra dependency, which anyio itself no longer brings."""
    try:
        token = anyio.lowlevel.current_token()
    except RuntimeError:  # no event loop in this thread (anyio's NoEventLoopError)
        return False
    return isinstance(token.native_token, asyncio.AbstractEventLoop)


class Lane:
    """Up to ``size`` async connections, opened on first use and kept for the next call."""

    def __init__(
        self,
        conninfo: str,
        kwargs: dict[str, Any],
        size: int,
        configure: Callable[[Any], None],
    ) -> None:
        self._conninfo = conninfo
        self._kwargs = kwargs
        #: The most connections open at once (calls beyond it wait for one).
        self.size = size
        self._configure = configure
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        #: Calls holding a connection slot (at most :attr:`size`).
        self._busy = 0
        #: Calls waiting for a slot, first come first served (each woken with the slot of the
        #: call that ended: see :meth:`_release`).
        self._queue: deque[anyio.Event] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        #: Set when the last call in flight ends (see :meth:`settled`).
        self._quiet: anyio.Event | None = None

    def _bind(self) -> bool:
        """Tie the lane to the running loop (False: another loop has a call in flight)."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return True
        if self._busy:
            return False
        self._drop_idle()
        self._loop = loop
        return True

    async def _acquire(self) -> None:
        """Take a slot, waiting while :attr:`size` calls are in flight. A free slot is taken
        without a scheduling pass (``anyio.Semaphore`` makes one on every acquire: ~50 us of
        CPU per call, measured on a call waiting 1.5 ms for its answer)."""
        if self._busy < self.size and not self._queue:
            self._busy += 1
            return
        turn = anyio.Event()
        self._queue.append(turn)
        await turn.wait()  # shielded by the caller; the slot is handed over by _release

    def _release(self) -> None:
        """Hand the slot to the first waiting call, or free it (the last one: wakes
        :meth:`settled`)."""
        if self._queue:
            self._queue.popleft().set()
        else:
            self._busy -= 1
            quiet = self._quiet
            if not self._busy and quiet is not None:
                self._quiet = None
                quiet.set()

    async def _get(self) -> psycopg.AsyncConnection[Any]:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs)
        self._configure(conn)
        return conn

    def _put(self, conn: psycopg.AsyncConnection[Any], healthy: bool) -> None:
        idle = psycopg.pq.TransactionStatus.IDLE
        if (
            healthy
            and not self._closed
            and not conn.closed
            and conn.info.transaction_status == idle
        ):
            self._idle.append(conn)
        else:
            _finish(conn)

    async def run(self, job: Callable[[psycopg.AsyncConnection[Any]], Any]) -> tuple[bool, Any]:
        """``(True, await job(conn))`` on a lane connection, or ``(False, None)`` when the
        lane can't serve this loop now (the caller takes the thread path). The call is shielded
        from cancellation, as a thread's call is: it ends, and its answer is read."""
        if self._closed or not self._bind():
            return False, None
        result: Any = None
        with anyio.CancelScope(shield=True):
            await self._acquire()
            conn: psycopg.AsyncConnection[Any] | None = None
            healthy = False
            try:
                conn = await self._get()
                result = await job(conn)
                healthy = True
            finally:
                if conn is not None:
                    self._put(conn, healthy)
                self._release()
        return True, result

    async def settled(self) -> None:
        """Until no call is in flight on the lane (at once when none is)."""
        while self._busy:
            if self._quiet is None:
                self._quiet = anyio.Event()
            await self._quiet.wait()

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            _finish(conn)

    def close(self) -> None:
        """Close the idle connections; one in use is closed when its call ends. Idempotent."""
        self._closed = True
        self._drop_idle()


class _Prepared:
    """A lane connection's own prepared statements (see :func:`prepared_call`)."""

    __slots__ = ("makers", "names", "tx")

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        #: (query, parameter types) -> the statement's name on this connection.
        self.names: dict[tuple[str, tuple[int, ...]], bytes] = {}
        #: A statement's name -> (``make_row``, what it made of the statement's first result):
        #: a prepared statement's columns are its own for its life on the connection (the
        #: server refuses to run it with others), so its rows' maker is made once, not from
        #: every result's ~40 column names.
        self.makers: dict[bytes, tuple[Any, Callable[[Sequence[Any]], Any]]] = {}
        #: The connection's adapters (its dumpers and loaders: :func:`~.dialect.configure_types`),
        #: kept for its calls as a psycopg cursor keeps its own.
        self.tx = Transformer(conn)


_PREPARED: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], _Prepared] = (
    weakref.WeakKeyDictionary()
)
_PLACEHOLDER = re.compile(r"%s")
#: Statements' text with ``$n`` placeholders, by their psycopg text (a handful of hot calls).
_NUMBERED: dict[str, bytes] = {}
_TEXT = pq.Format.TEXT


def _numbered(query: str) -> bytes:
    """``query`` with psycopg's ``%s`` placeholders as PostgreSQL's ``$1, $2, ...``."""
    found = _NUMBERED.get(query)
    if found is None:
        if "%" in _PLACEHOLDER.sub("", query):
            raise ValueError("only %s placeholders are supported here")
        count = iter(range(1, 1 << 16))
        found = _PLACEHOLDER.sub(lambda _: f"${next(count)}", query).encode()
        _NUMBERED[query] = found
    return found


async def prepared_call(
    conn: psycopg.AsyncConnection[Any],
    query: str,
    params: Sequence[Any],
    make_row: Callable[[pq.abc.PGresult], Callable[[Sequence[Any]], Any]],
) -> list[Any]:
    """``query`` (psycopg ``%s`` placeholders only) as a prepared statement on ``conn``, its
    rows (``make_row(result)`` makes each), in one round trip once prepared on ``conn``.

    What ``conn.execute(query, params, prepare=True)`` does, on libpq itself: the same
    parameters' adaptation and rows' loading (psycopg's ``Transformer`` over the
    connection's adapters), the same protocol messages, without psycopg's per-call
    machinery around them (a cursor, its prepare bookkeeping, its async wait's poll, timer
    and busy-time checks). A hot-path statement waits ~1.5-2 ms for its durable commit, the
    loop often idle meanwhile: a statement waiting 2 ms on the server took 104-130 us of
    the loop's CPU through psycopg's ``execute`` and 32-49 us this way (same run, uvloop;
    docs/benchmarks/postgresql.md). An error the server answers is raised as
    psycopg raises it (``psycopg.Error`` with its SQLSTATE); the connection stays usable."""
    state = _PREPARED.get(conn)
    if state is None:
        state = _PREPARED[conn] = _Prepared(conn)
    tx = state.tx
    values = tx.dump_sequence(params, [PyFormat.AUTO] * len(params))
    types = tx.types or ()
    formats = tx.formats
    pgconn = conn.pgconn
    key = (query, types)
    name = state.names.get(key)
    if name is None:
        name = f"_bw_hot_{len(state.names)}".encode()
        pgconn.send_prepare(name, _numbered(query), param_types=types)
        _check(await _results(pgconn), conn)
        state.names[key] = name
    pgconn.send_query_prepared(name, values, param_formats=formats, result_format=_TEXT)
    results = await _results(pgconn)
    res = _check(results, conn)
    tx.set_pgresult(res)
    maker = state.makers.get(name)
    if maker is None or maker[0] is not make_row:
        maker = state.makers[name] = (make_row, make_row(res))
    return tx.load_rows(0, res.ntuples, maker[1])


async def simple_query(conn: psycopg.AsyncConnection[Any], query: bytes) -> None:
    """``query`` (statements without parameters) in one round trip of the simple query
    protocol, its results read and dropped: what ``conn.execute(query, prepare=False)`` does
    for a caller that reads no rows (a create's gathered write, :class:`~.dialect.OneTrip`),
    on libpq itself as :func:`prepared_call` does, without psycopg's per-call machinery. A
    create is on every pickup's path, its producer idle between creates: that call's CPU,
    caches cold, 424-442 -> 269-293 us (docs/benchmarks/pickup.md). An error the
    server answers is raised as psycopg raises it (the transaction left failed, for the
    caller's rollback)."""
    pgconn = conn.pgconn
    pgconn.send_query(query)
    _check(await _results(pgconn), conn)


#: The statements :func:`prepare_once` prepared on each lane connection, by name.
_ONCE: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], set[str]] = (
    weakref.WeakKeyDictionary()
)


async def prepare_once(conn: psycopg.AsyncConnection[Any], statements: Mapping[str, str]) -> None:
    """Each of ``statements`` (name -> query, psycopg ``%s`` placeholders only) prepared on
    ``conn`` once per connection: those it lacks in one round trip of ``PREPARE`` s (outside
    any transaction: a later rollback keeps them), none the next time.

    For statements sent as ``EXECUTE name(...)`` inside a multi-statement round trip (a
    create's: :class:`~.dialect.OneTrip`), where an extended-protocol prepared statement
    can't go: PostgreSQL's plan cache plans each for its first few runs on the connection,
    then keeps its generic plan (their values change no plan), where the plain text was
    parsed and planned at every create (docs/benchmarks/postgresql.md). A name is an
    identifier of ours. An error is raised as psycopg raises it, the connection closed (which
    of the round trip's statements were prepared is not known; a lane never reuses it)."""
    done = _ONCE.get(conn)
    if done is None:
        done = _ONCE[conn] = set()
    missing = [name for name in statements if name not in done]
    if not missing:
        return
    sql = b"".join(
        b"PREPARE " + name.encode() + b" AS " + _numbered(statements[name]) + b";"
        for name in missing
    )
    try:
        await conn.execute(sql, prepare=False)
    except BaseException:
        await conn.close()
        raise
    done.update(missing)


def _check(results: list[pq.abc.PGresult], conn: psycopg.AsyncConnection[Any]) -> pq.abc.PGresult:
    """The last result of a statement; the server's error raised as psycopg raises it."""
    for res in results:
        if res.status == pq.ExecStatus.FATAL_ERROR:
            raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
    if not results:
        raise psycopg.OperationalError("the server answered nothing")
    return results[-1]


async def _results(pgconn: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """Send what libpq holds and read every result of the command in flight, waiting on the
    loop's reader (one future per wait, the socket registered only while waiting)."""
    loop = asyncio.get_running_loop()
    fd = pgconn.socket
    while pgconn.flush():  # a big statement the socket took only part of: as psycopg's
        if await _ready(loop, fd, write=True):  # send, read what the server says meanwhile
            pgconn.consume_input()
    out: list[pq.abc.PGresult] = []
    while True:
        pgconn.consume_input()
        while not pgconn.is_busy():
            res = pgconn.get_result()
            if res is None:
                return out
            out.append(res)
        await _ready(loop, fd, write=False)


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> bool:
    """Until ``fd`` is readable (or, with ``write``, either writable or readable): whether it
    is readable."""
    fut: asyncio.Future[None] = loop.create_future()
    readable = False

    def wake(read: bool) -> None:
        nonlocal readable
        readable = readable or read
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, wake, True)
    if write:
        loop.add_writer(fd, wake, False)
    try:
        await fut
    finally:
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)
    return readable


def _finish(conn: psycopg.AsyncConnection[Any]) -> None:
    """Close a connection without awaiting (libpq's own close: no loop needed)."""
    with contextlib.suppress(Exception):
        conn.pgconn.finish()
