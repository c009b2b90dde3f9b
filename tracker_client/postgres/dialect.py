"""The rules' connection on PostgreSQL: named statements run as written, over psycopg.

The PostgreSQL rail keeps one copy of docs/guarantees/backlog.md's rules: the domain functions
of :mod:`tracker_client.rules`, which take a ``Ctx`` and run statements by name
(``ctx.exec("runs.move", ...)``). :class:`PgConn` is that ``Ctx``'s connection on one psycopg
connection inside one transaction. It runs only :class:`~tracker_client.rules.statements.Statement`
objects, PostgreSQL's own text from ``tracker_client/postgres/sql/*.sql`` (nothing rewrites
SQLite's SQL), and honours their hints:

* ``shared``: the write may run in a transaction holding the write lock in shared mode (a
  claim's or a lease's own writes: each touches only its task's row, locked, and its run). Any
  other write there (a dead letter and its propagation, fan-in edges ...) raises
  :class:`NeedExclusive` and the operation runs again alone, so the rules that read other rows
  before they write stay exact (a whitelist: a statement without the hint never runs shared);
* ``in-write: <name>``: inside a write transaction that statement runs instead (the lease read
  that locks the task's row);
* ``deferred``: nobody reads its answer: queued and sent with the next statement or the
  ``COMMIT``, in the same round trip;
* ``returning: <column>``: its ``RETURNING`` column is the cursor's ``lastrowid``;
* ``prepared: <name>``: in a create's one round trip (:class:`OneTrip`) the deferred write is
  sent as ``EXECUTE <name>(...)`` of a statement prepared once per connection
  (:func:`~.aio.prepare_once`): PostgreSQL plans it there, not at every create.

Parameters are bound on the client (psycopg's ``ClientCursor``): a literal has no type until
the column gives it one, as in SQLite, so ``%s IS NULL`` and text ids work unchanged; ``bool``
is bound as ``0``/``1`` (the schema keeps SQLite's integer flags). Rows answer ``row["name"]``,
``row[0]`` and unpacking, as ``sqlite3.Row`` does. No I/O of its own beyond the connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache
from operator import itemgetter
from typing import Any, NamedTuple, cast

import psycopg
from psycopg.adapt import Buffer
from psycopg.types.numeric import Int8Dumper, NumericLoader

from tracker_client.rules.statements import Statement, Statements

__all__ = [
    "STATEMENTS",
    "NeedExclusive",
    "NeedsTrip",
    "OneTrip",
    "PgConn",
    "PgCursor",
    "Prepared",
    "Row",
    "configure_types",
    "row_factory",
    "row_maker",
]


#: The PostgreSQL engine's named statements (``tracker_client/postgres/sql/*.sql``).
STATEMENTS = Statements.load("tracker_client.postgres", "postgres")


class NeedExclusive(Exception):
    """Raised inside a shared-mode write that must run alone (its transaction is rolled back
    and the write run again under the exclusive write lock)."""


class NeedsTrip(Exception):
    """Raised by :class:`OneTrip` at a statement whose answer is read (the write then runs on
    a pooled connection, from the start)."""


class Row:
    """One result row: by column name, by position, iterable (``sqlite3.Row``'s face)."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        """The column names, in order."""
        return list(self._index)

    def as_dict(self) -> dict[str, Any]:
        """The row as a new dict, column name to value."""
        return dict(zip(self._index, self._values, strict=True))

    def pick(self, names: tuple[str, ...]) -> dict[str, Any]:
        """Those of ``names`` the row has, name to value, as a new dict (a name it lacks is
        left out). Which of them the row has, and where, is worked out once per set of
        columns (:data:`_PICKS`): a claim's lease picks 24 of a row's 30 columns, ~27k
        instructions a row by a comprehension, ~18k so (callgrind)."""
        index = self._index
        key = (id(index), names)
        found = _PICKS.get(key)
        if found is None or found[0] is not index:
            present = tuple(name for name in names if name in index)
            if len(_PICKS) >= _PICKS_KEPT:
                _PICKS.clear()
            found = _PICKS[key] = (index, present, _getter([index[name] for name in present]))
        return dict(zip(found[1], found[2](self._values), strict=True))

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._index, self._values, strict=True))!r})"


#: :meth:`Row.pick`'s plans: (the index's identity, the names asked) -> (that index, kept
#: here so its identity is not reused while the plan is, the names it has, their getter).
_PICKS: dict[
    tuple[int, tuple[str, ...]],
    tuple[dict[str, int], tuple[str, ...], Callable[[Sequence[Any]], tuple[Any, ...]]],
] = {}
_PICKS_KEPT = 256


def _getter(positions: list[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """The values at ``positions`` of a row's values, as a tuple (one C call)."""
    if len(positions) == 1:
        only = positions[0]
        return lambda values: (values[only],)
    if not positions:
        return lambda values: ()
    return cast("Callable[[Sequence[Any]], tuple[Any, ...]]", itemgetter(*positions))


@lru_cache(maxsize=256)
def _index(names: tuple[bytes, ...]) -> dict[str, int]:
    return {name.decode(): i for i, name in enumerate(names)}


def row_factory(cursor: psycopg.Cursor[Any]) -> Any:
    """psycopg row factory making :class:`Row` objects.

    The column names come from the result itself (``cursor.description`` builds a ``Column``
    per column, type looked up: a task row's 40 of them on every statement), their index
    cached per distinct set of names.
    """
    return row_maker(cursor.pgresult)


def row_maker(result: psycopg.pq.abc.PGresult | None) -> Callable[[Sequence[Any]], Row]:
    """What makes the :class:`Row` s of ``result`` (see :func:`row_factory`)."""
    if result is None or not result.nfields:
        index: dict[str, int] = {}
    else:
        index = _index(tuple(result.fname(i) or b"" for i in range(result.nfields)))

    def make(values: Sequence[Any]) -> Row:
        return Row(values, index)

    return make


class _BoolAsInt(Int8Dumper):
    """``True``/``False`` as ``1``/``0``: the schema keeps SQLite's integer flags."""

    def dump(self, obj: Any) -> Buffer | None:
        return b"1" if obj else b"0"


class _NumericAsNumber(NumericLoader):
    """``numeric`` (``sum`` of bigints) as ``int`` when integral, else ``float``, as SQLite."""

    def load(self, data: Buffer) -> Any:
        value: Decimal = super().load(data)
        if value == value.to_integral_value():
            return int(value)
        return float(value)


def configure_types(conn: psycopg.Connection[Any]) -> None:
    """Register the bool dumper and numeric loader on ``conn`` (once per pooled connection)."""
    conn.adapters.register_dumper(bool, _BoolAsInt)
    conn.adapters.register_loader("numeric", _NumericAsNumber)


def _has_rows(cur: psycopg.Cursor[Any]) -> bool:
    """Whether the statement answered rows (``description`` without building its columns)."""
    result = cur.pgresult
    return result is not None and result.nfields > 0


class PgCursor:
    """The answer of one statement: rows, ``rowcount``, ``lastrowid`` (``sqlite3``'s face)."""

    __slots__ = ("_cur", "_rows", "lastrowid", "rowcount")

    def __init__(self, cur: psycopg.Cursor[Any], returning: str | None) -> None:
        self._cur = cur
        self.rowcount = cur.rowcount
        self.lastrowid: int | None = None
        self._rows: list[Any] | None = None
        if returning is not None:
            row = cur.fetchone()
            self.lastrowid = None if row is None else int(row[0])
            self._rows = []

    def fetchone(self) -> Any:
        """The next row or None."""
        if self._rows is not None:
            return self._rows.pop(0) if self._rows else None
        if not _has_rows(self._cur):
            return None
        return self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        """The remaining rows."""
        if self._rows is not None:
            rows, self._rows = self._rows, []
            return rows
        if not _has_rows(self._cur):
            return []
        return self._cur.fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class Prepared(NamedTuple):
    """SQL of an engine's own sent with a write (its lock, a wake-up before the ``COMMIT``):
    ``plain`` (bound, ending in ``;``) in a simple query, or in a create's one round trip
    (:class:`OneTrip`) ``execute`` (``EXECUTE name(...);``) of ``query`` (``%s``
    placeholders) prepared once per connection: planned there, not at every create."""

    name: str
    query: str
    plain: str
    execute: str


class PgConn:
    """One psycopg connection inside one transaction, as the rules use it (named statements).

    Round trips are saved twice: ``begin`` (the transaction's ``BEGIN`` and write lock) travels
    with the first statement, and ``deferred`` writes with the next statement or the
    ``COMMIT`` (several statements in one simple query, the parameters bound on the client).
    """

    __slots__ = ("before_commit", "begin", "pending", "raw", "shared", "write")

    def __init__(
        self,
        raw: psycopg.Connection[Any],
        *,
        shared: bool = False,
        write: bool = False,
        begin: str = "",
    ) -> None:
        self.raw = raw
        #: The transaction holds the write lock in shared mode (a claim beside other claims).
        self.shared = shared
        #: A write transaction (the lease read locks the task row).
        self.write = write
        #: ``BEGIN`` (and the lock), each ending in ``;``, not sent yet.
        self.begin = begin
        #: Bound statements (each ending in ``;``) not sent yet: ``begin`` and deferred writes.
        self.pending: list[str] = [begin] if begin else []
        #: SQL (each ending in ``;``) the transaction runs right before its ``COMMIT``.
        self.before_commit: list[str] = []

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (the rules check before a rollback)."""
        if self.begin and self.pending and self.pending[0] == self.begin:
            return True  # BEGIN not sent yet, but the transaction is ours all the same
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def commit_sql(self) -> bytes:
        """What is still to send, then ``before_commit``, then ``COMMIT``: one round trip."""
        return "".join([*self.pending, *self.before_commit, "COMMIT"]).encode()

    def commit_with(self, sql: Prepared) -> None:
        """``sql`` run right before the ``COMMIT`` (its plain text here)."""
        self.before_commit.append(sql.plain)

    def flush(self) -> None:
        """Send what is pending now (before a statement run on ``raw`` itself)."""
        if self.pending:
            sql, self.pending = "".join(self.pending), []
            self.raw.execute(sql.encode())

    def run(self, text: str, args: Any) -> psycopg.Cursor[Any]:
        """Send what is pending and ``text`` (psycopg SQL) in one round trip; the cursor is
        left on ``text``'s result."""
        cur = psycopg.ClientCursor(self.raw)
        if not self.pending:
            cur.execute(text.replace("%%", "%") if args is None else text, args)
            return cur
        bound = text.replace("%%", "%") if args is None else cur.mogrify(text, args)
        sql, self.pending = "".join([*self.pending, bound]), []
        cur.execute(sql.encode())
        while cur.nextset():
            pass
        return cur

    def execute(self, sql: Statement, params: Sequence[Any] | Mapping[str, Any] = ()) -> PgCursor:
        """Run one named PostgreSQL statement as written, honouring its hints (see the module
        docstring); ``params`` positional for ``%s``, a mapping for ``%(name)s``. Raw SQL text
        is refused (``TypeError``): each statement is named in ``postgres/sql``."""
        if not isinstance(sql, Statement):
            raise TypeError(
                "PgConn runs named statements (tracker_client/postgres/sql), not raw SQL: "
                f"{str(sql)[:60]!r}"
            )
        if self.shared and sql.hint("shared") is None and not sql.startswith("SELECT"):
            raise NeedExclusive(sql.name)
        if self.write:
            variant = sql.hint("in-write")
            if variant:
                sql = STATEMENTS[variant]
        args: Any = dict(params) if isinstance(params, Mapping) else (tuple(params) or None)
        if sql.hint("deferred") is not None:
            cur = psycopg.ClientCursor(self.raw)
            bound = sql.replace("%%", "%") if args is None else cur.mogrify(sql, args)
            self.pending.append(bound + ";")
            return _DONE
        return PgCursor(self.run(sql, args), sql.hint("returning"))


class _Done(PgCursor):
    """The answer of a deferred write: no rows (no caller reads it)."""

    def __init__(self) -> None:
        self.rowcount = -1
        self.lastrowid = None
        self._rows = []


_DONE = _Done()


class OneTrip(PgConn):
    """A write transaction gathered whole before anything is sent: every statement must be
    ``deferred`` (nobody reads its answer); the first one that is not raises
    :class:`NeedsTrip`. :meth:`~PgConn.commit_sql` is then the whole transaction (``BEGIN``
    and the lock, the writes, ``before_commit``, ``COMMIT``): one round trip, sent by the
    caller on an async connection (a create on the event loop, see :mod:`.engine`).

    ``conn`` (a psycopg async connection, configured as the pool's) only binds parameters
    (``mogrify``, on the client); nothing is sent here. ``lock``: the write lock, taken after
    ``BEGIN``. The lock, a ``prepared`` statement's write and :meth:`commit_with`'s SQL go as
    ``EXECUTE`` of statements the caller prepares on ``conn`` once (:attr:`prepared`):
    PostgreSQL plans them once per connection, not at every create.

    ``versions``: a pipeline's version as this process last read it (None: not known). The
    rules look at it again after a second (``PipelineCache.recent``), which would be a read:
    here it is answered from ``versions`` and checked by the server instead, with the insert
    (:data:`PIPELINE_IS`, schema 18: SQLSTATE ``BW001``, the create rolled back, when the
    pipeline has moved on meanwhile)."""

    __slots__ = ("_bind", "_versions", "prepared")

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        lock: Prepared,
        versions: Callable[[str], int | None] | None = None,
    ) -> None:
        super().__init__(
            cast(psycopg.Connection[Any], None), write=True, begin="BEGIN;" + lock.execute
        )
        self._bind = psycopg.AsyncClientCursor(conn)
        self._versions = versions
        #: The prepared statements it EXECUTEs (name -> query, ``%s`` placeholders): the
        #: write lock's (``lock``), ``prepared`` statements' and :meth:`commit_with`'s; the
        #: caller prepares each on ``conn`` first (:func:`~.aio.prepare_once`).
        self.prepared: dict[str, str] = {lock.name: lock.query}

    @property
    def in_transaction(self) -> bool:
        """Always: the transaction is this one, not sent yet."""
        return True

    def commit_with(self, sql: Prepared) -> None:
        """``sql`` run right before the ``COMMIT``, as ``EXECUTE`` of its prepared statement."""
        self.prepared[sql.name] = sql.query
        self.before_commit.append(sql.execute)

    def execute(self, sql: Statement, params: Sequence[Any] | Mapping[str, Any] = ()) -> PgCursor:
        """Queue deferred statement ``sql``; :class:`NeedsTrip` for any other."""
        if not isinstance(sql, Statement):
            raise TypeError(f"PgConn runs named statements, not raw SQL: {str(sql)[:60]!r}")
        if sql.name == "pipelines.version" and self._versions is not None:
            return self._version(params)
        if sql.hint("deferred") is None:
            raise NeedsTrip(sql.name)
        args: Any = dict(params) if isinstance(params, Mapping) else (tuple(params) or None)
        name = sql.hint("prepared")
        if name and isinstance(args, tuple):
            self.prepared[name] = sql
            bound = self._bind.mogrify(_execute_sql(name, len(args)), args)
        else:
            bound = sql.replace("%%", "%") if args is None else self._bind.mogrify(sql, args)
        self.pending.append(bound + ";")
        return _DONE

    def _version(self, params: Sequence[Any] | Mapping[str, Any]) -> PgCursor:
        """``pipelines.version`` answered from what this process knows, checked at commit."""
        assert self._versions is not None
        pid = params[0] if isinstance(params, Sequence) else None
        known = self._versions(pid) if isinstance(pid, str) else None
        if known is None:
            raise NeedsTrip("pipelines.version")
        self.pending.append(self._bind.mogrify(PIPELINE_IS, (pid, known)) + ";")
        return _Answer([(known,)])


@lru_cache(maxsize=16)
def _execute_sql(name: str, count: int) -> str:
    """``EXECUTE name(%s, ...)`` with ``count`` placeholders (``name``: a statement's
    ``prepared`` hint, an identifier of ours)."""
    return f"EXECUTE {name}({', '.join(['%s'] * count)})"


#: The check a :class:`OneTrip` create sends for a pipeline version it did not read (schema
#: 18); psycopg's placeholders, engine-internal (no domain rule runs it).
PIPELINE_IS = "SELECT bw_pipeline_is(%s, %s)"


class _Answer(PgCursor):
    """Rows known without asking the server."""

    def __init__(self, rows: list[Any]) -> None:
        self.rowcount = len(rows)
        self.lastrowid = None
        self._rows = rows
