"""The embedded rail's SQL on PostgreSQL: a connection with ``sqlite3``'s face over psycopg.

The PostgreSQL rail keeps one copy of docs/guarantees/backlog.md's rules: the embedded rail's
domain functions (:mod:`tracker_client.rules.tasks`, ``runs``, ``backlog``, ...), which take a
``Ctx`` whose ``conn`` answers ``execute(sql, params)``. :class:`PgConn` is such a connection on
one psycopg connection inside one transaction. Its SQL is the embedded SQL, rewritten once per
distinct statement (cached) by :func:`translate`:

* ``?`` and ``?NNN`` placeholders -> psycopg's ``%s`` / ``%(pNNN)s`` (``%`` escaped);
* ``coalesce(<comparison>, 0)`` -> ``coalesce((<comparison>)::int, 0)``;
* ``CASE WHEN ? THEN`` (a bound flag) -> ``CASE WHEN (?) <> 0 THEN``;
* ``INDEXED BY name`` dropped (the planner picks PostgreSQL's partial indexes itself);
* ``INSERT OR REPLACE`` / ``INSERT OR IGNORE`` -> ``ON CONFLICT ... DO UPDATE`` / ``DO NOTHING``;
* an ``INSERT`` into a table with a generated key gets ``RETURNING`` it (``cursor.lastrowid``);
* ``PRAGMA`` (file housekeeping with no PostgreSQL meaning) answers ``0``.

Parameters are bound on the client (psycopg's ``ClientCursor``): a literal has no type until
the column gives it one, as in SQLite, so ``? IS NULL`` and text ids work unchanged; ``bool`` is
bound as ``0``/``1`` (the schema keeps SQLite's integer flags). Rows answer ``row["name"]``,
``row[0]`` and unpacking, as ``sqlite3.Row`` does.

Statements that are PostgreSQL's own (the claim, the store search, migrations) are in
``schema/`` and the modules that run them, not here. No I/O of its own beyond the connection.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

import psycopg
from psycopg.adapt import Buffer
from psycopg.types.numeric import Int8Dumper, NumericLoader

from tracker_client.rules.statements import Statement, Statements

__all__ = [
    "SHARED_OK",
    "STATEMENTS",
    "NeedExclusive",
    "PgConn",
    "PgCursor",
    "Row",
    "configure_types",
    "row_factory",
    "translate",
]


#: The PostgreSQL engine's named statements (``tracker_client/postgres/sql/*.sql``).
STATEMENTS = Statements.load("tracker_client.postgres", "postgres")


class NeedExclusive(Exception):
    """Raised inside a shared-mode write that must run alone (its transaction is rolled back
    and the write run again under the exclusive write lock)."""


#: The writes a transaction holding the write lock in shared mode may make (a claim, a lease's
#: own writes: each touches only its task's row, locked, and its run). Any other write (a
#: dead letter and its propagation, fan-in edges, a checkpoint's artifacts ...) raises
#: :class:`NeedExclusive` and the operation runs again alone: the rules that read other rows
#: before they write stay exact (a whitelist: a write not foreseen here is never run shared).
SHARED_OK = (
    "INSERT INTO events ",
    "INSERT INTO idempotency ",
    "UPDATE runs SET status = 'completed', ",
    "UPDATE runs SET status = 'failed', ",
    "UPDATE runs SET status = 'released', ",
    "UPDATE tasks SET stage = ?, task_version = task_version + 1, dead_letter_reason = NULL, ",
    "UPDATE tasks SET failed_attempts = ?, stale_streak = 0, ",
    "UPDATE tasks SET next_eligible_at_ms = ?, updated_at_ms = ? WHERE seq = ?",
    "UPDATE tasks SET updated_at_ms = ?, lease_expires_at_ms = 0, ",
    "UPDATE tasks SET lease_expires_at_ms = ? WHERE seq = ?",
)

#: Tables whose key is generated (``lastrowid`` is that column of the inserted row).
GENERATED_KEYS = {
    "events": "id",
    "store": "id",
    "tasks": "seq",
    "pipelines": "seq",
    "dependencies": "seq",
    "assignments": "seq",
    "artifacts": "seq",
    "span_batches": "id",
}
#: Conflict targets of ``INSERT OR REPLACE`` (the table's primary key).
PRIMARY_KEYS = {"rate_limits": ("role",), "schedules": ("name",), "store": ("namespace", "key")}

_INDEXED_BY = re.compile(r"\s+INDEXED\s+BY\s+\w+", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"\?(\d*)")
_CASE_FLAG = re.compile(r"CASE\s+WHEN\s+(\?\d*)\s+THEN", re.IGNORECASE)
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_OR_REPLACE = re.compile(
    r"^\s*INSERT\s+OR\s+REPLACE\s+INTO\s+(\w+)\s*\(([^)]*)\)(.*)$", re.IGNORECASE | re.DOTALL
)
_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\s+", re.IGNORECASE)
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+(\w+)", re.IGNORECASE)


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

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._index, self._values, strict=True))!r})"


@lru_cache(maxsize=256)
def _index(names: tuple[bytes, ...]) -> dict[str, int]:
    return {name.decode(): i for i, name in enumerate(names)}


def row_factory(cursor: psycopg.Cursor[Any]) -> Any:
    """psycopg row factory making :class:`Row` objects.

    The column names come from the result itself (``cursor.description`` builds a ``Column``
    per column, type looked up: a task row's 40 of them on every statement), their index
    cached per distinct set of names.
    """
    result = cursor.pgresult
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


_COALESCE = re.compile(r"\bcoalesce\(", re.IGNORECASE)
_PREDICATE = re.compile(r"\s(=|<>|!=|<=|>=|<|>|AND|OR|IS)\s", re.IGNORECASE)


def _int_predicates(text: str) -> str:
    """``coalesce(<comparison>, 0)`` -> ``coalesce((<comparison>)::int, 0)``: SQLite's
    comparisons are integers, PostgreSQL's booleans, and COALESCE wants one type."""
    out, pos = [], 0
    for match in _COALESCE.finditer(text):
        if match.start() < pos:
            continue
        depth, i, split = 1, match.end(), -1
        while i < len(text) and depth:
            ch = text[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "," and depth == 1 and split < 0:
                split = i
            i += 1
        if split < 0 or depth:
            continue
        first, rest = text[match.end() : split], text[split + 1 : i - 1]
        if rest.strip() == "0" and _PREDICATE.search(first):
            out.append(text[pos : match.end()] + f"({first})::int," + text[split + 1 : i])
            pos = i
    out.append(text[pos:])
    return "".join(out)


@lru_cache(maxsize=1024)
def translate(sql: str, named: bool = False) -> tuple[str, bool, str | None]:
    """(psycopg SQL, whether placeholders are numbered, the generated key it returns or None).

    ``named``: the parameters are a mapping and the placeholders ``:name``.
    """
    text = _INDEXED_BY.sub("", sql)
    # A bound flag is 0/1 here (see _BoolAsInt): as a CASE condition it needs a comparison.
    text = _CASE_FLAG.sub(r"CASE WHEN (\1) <> 0 THEN", text)
    text = _int_predicates(text)
    stripped = text.strip()
    if stripped.upper().startswith("PRAGMA"):
        return "SELECT 0", False, None
    match = _OR_REPLACE.match(text)
    if match is not None:
        table, cols, rest = match.group(1), match.group(2), match.group(3)
        keys = PRIMARY_KEYS[table]
        names = [c.strip() for c in cols.split(",")]
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in names if c not in keys)
        text = (
            f"INSERT INTO {table} ({cols}){rest} ON CONFLICT ({', '.join(keys)}) "
            f"DO UPDATE SET {updates}"
        )
    elif _OR_IGNORE.match(text):
        text = _OR_IGNORE.sub("INSERT INTO ", text) + " ON CONFLICT DO NOTHING"
    returning = None
    insert = _INSERT.match(text)
    if insert is not None and "RETURNING" not in text.upper():
        returning = GENERATED_KEYS.get(insert.group(1).lower())
        if returning is not None:
            text += f" RETURNING {returning}"
    text = text.replace("%", "%%")
    numbered = False

    def placeholder(m: re.Match[str]) -> str:
        nonlocal numbered
        if m.group(1):
            numbered = True
            return f"%(p{m.group(1)})s"
        return "%s"

    text = _NAMED.sub(r"%(\1)s", text) if named else _PLACEHOLDER.sub(placeholder, text)
    return text, numbered, returning


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


#: Writes whose answer no caller reads (the lease writes' updates, the idempotency record):
#: queued and sent with the next statement or with ``COMMIT``, in the same round trip. An
#: error in one (a unique key, say) surfaces there, inside the same transaction, all the same.
DEFERRED = tuple(p for p in SHARED_OK if not p.startswith("INSERT INTO events"))


class PgConn:
    """One psycopg connection inside one transaction, as the embedded domain functions use it.

    Round trips are saved twice: ``begin`` (the transaction's ``BEGIN`` and write lock) travels
    with the first statement, and :data:`DEFERRED` writes with the next statement or the
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
        """Whether a transaction is open (the embedded code checks before a rollback)."""
        if self.begin and self.pending and self.pending[0] == self.begin:
            return True  # BEGIN not sent yet, but the transaction is ours all the same
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def commit_sql(self) -> bytes:
        """What is still to send, then ``before_commit``, then ``COMMIT``: one round trip."""
        return "".join([*self.pending, *self.before_commit, "COMMIT"]).encode()

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

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> PgCursor:
        """Run one statement: a named PostgreSQL :class:`Statement` as written (its hints say
        whether it may run shared, is deferred, returns a generated key, or has a locking
        variant inside a write), or an embedded-dialect string (see :func:`translate`)."""
        if isinstance(sql, Statement):
            return self._statement(sql, params)
        if self.shared and not sql.startswith(("SELECT", *SHARED_OK)):
            raise NeedExclusive(sql[:60])
        if isinstance(params, Mapping):
            text, _, returning = translate(sql, True)
            args: Any = dict(params)
        else:
            text, numbered, returning = translate(sql)
            args = tuple(params)
            if numbered:
                args = {f"p{i}": v for i, v in enumerate(params, start=1)}
            elif not params:
                args = None
        if sql.startswith(DEFERRED):
            cur = psycopg.ClientCursor(self.raw)
            bound = text.replace("%%", "%") if args is None else cur.mogrify(text, args)
            self.pending.append(bound + ";")
            return _DONE
        return PgCursor(self.run(text, args), returning)

    def _statement(self, sql: Statement, params: Sequence[Any] | Mapping[str, Any]) -> PgCursor:
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
