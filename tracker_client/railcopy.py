"""``rail copy``: move a rail, row for row, between an embedded file and PostgreSQL.

:func:`copy_rail` copies every table the two rails share (pipelines, tasks, runs, events,
artifact records, dependencies, assignments, idempotency records, the store, schedules, rate
limits, span batches, spans, the worker registry) with their ids, versions and timestamps as
they are, in batches (``COPY`` into PostgreSQL, ``executemany`` into SQLite), from
``sqlite:///file.db`` to ``postgresql://...`` and back (or between two rails of one kind).

Rules (docs/operate/postgresql.md, "Moving a rail", says them too):

* the source is read in one snapshot (a deferred SQLite read transaction, a PostgreSQL
  ``REPEATABLE READ`` one) and never written; a source that does not exist is refused, not
  created. It is opened once first, so an older schema is migrated as its next open would;
* the target is opened (created and migrated), then written in ONE transaction holding the
  rail's write lock alone: a failed copy leaves it as it was, and no worker writes in between;
* a target holding any row is refused naming its tables, nothing written. ``force`` replaces
  the target's rows with the source's (never merges: two rails' ids would collide), still in
  that one transaction;
* a live lease is never copied live: a running task arrives with its lease lapsed at the copy
  time, so the target's first claim or maintenance pass reclaims it as it would a dead worker's
  (the old worker, if it is still running, talks to the old rail);
* at the end, before the commit, the rows of every table are counted on both sides; a
  difference fails the copy naming the table, and nothing is written;
* URLs are shown without passwords (``tracker.path``), in reports and errors alike.

Generated keys keep their values and PostgreSQL's identity sequences move past them. Tables one
rail has and the other lacks (PostgreSQL's ``followers``, SQLite's full-text index, which the
store's triggers fill) are not copied, nor the rail's secrets (a copy makes its own lease-token
key: see :mod:`tracker_client.rules.leasekeys`). No network beyond the two rails' own
connections.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from tracker_client.errors import BacklogWorkerError, ConfigError, NoRail
from tracker_client.extras import require
from tracker_client.factory import open_tracker, parse_sqlite_url
from tracker_client.urlmask import mask_url

__all__ = ["CopyFailed", "CopyReport", "RailNotEmpty", "copy_rail"]

#: The order tables are written in (a referenced table first); unknown shared tables go last.
ORDER = (
    "pipelines",
    "tasks",
    "runs",
    "events",
    "artifacts",
    "dependencies",
    "assignments",
    "idempotency",
    "store",
    "schedules",
    "rate_limits",
    "span_batches",
    "spans",
    "workers",
)
#: Bookkeeping of one engine, never copied; and the rail's own secrets (``rail_secrets``): a
#: copy is a new rail and makes its own lease-token key on its first keyed claim (no lease is
#: live across a copy, so none needs the old key; two rails never share one). The SQLite
#: engine's wake counter (``wakes``) is bookkeeping too: a copy's first waking write makes its own.
_SKIP = frozenset({"sqlite_sequence", "backlog_schema", "followers", "rail_secrets", "wakes"})
DEFAULT_BATCH = 1000


class RailNotEmpty(ConfigError):
    """The target rail holds rows and ``force`` was not given (nothing was written)."""


class CopyFailed(BacklogWorkerError):
    """The copy could not be completed (a count differs, a row was refused): nothing written."""


@dataclass(frozen=True)
class CopyReport:
    """What a copy did: rows per table, whether the target's rows were replaced, the leases
    that arrived lapsed, the two rails' URLs (without passwords)."""

    source: str
    target: str
    tables: dict[str, int]
    replaced: dict[str, int] = field(default_factory=dict)
    lapsed_leases: int = 0


# -- the two engines -----------------------------------------------------------------------------
class _Side:
    """One rail's tables over a raw connection of its engine."""

    shown: str

    def columns(self) -> dict[str, list[str]]:
        raise NotImplementedError

    def count(self, table: str) -> int:
        raise NotImplementedError

    def read(self, table: str, cols: Sequence[str], batch: int) -> Iterator[list[tuple[Any, ...]]]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _SqliteSide(_Side):
    def __init__(self, path: str, shown: str, *, write: bool) -> None:
        self.shown = shown
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
        self.conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def columns(self) -> dict[str, list[str]]:
        names = [
            str(r[0])
            for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not str(r[0]).startswith(("store_fts", "schema_additions"))
        ]
        return {t: [str(c[1]) for c in self.conn.execute(f"PRAGMA table_info({t})")] for t in names}

    def count(self, table: str) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def read(self, table: str, cols: Sequence[str], batch: int) -> Iterator[list[tuple[Any, ...]]]:
        cur = self.conn.execute(f"SELECT {', '.join(cols)} FROM {table}")
        while rows := cur.fetchmany(batch):
            yield [tuple(r) for r in rows]

    def clear(self, tables: Sequence[str]) -> None:
        for table in reversed(tables):
            self.conn.execute(f"DELETE FROM {table}")

    def write(self, table: str, cols: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        marks = ", ".join("?" for _ in cols)
        self.conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", rows)

    def finish(self) -> None:
        self.conn.execute("COMMIT")

    def close(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        self.conn.close()


class _PgSide(_Side):
    def __init__(self, db: Any, shown: str, *, write: bool) -> None:
        import psycopg

        self.shown = shown
        self.schema: str = db.schema
        self.conn = psycopg.connect(
            db.conninfo, options=f"-c search_path={self.schema}", connect_timeout=10
        )
        if write:
            self.conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (db.lock_name,)
            )
        else:
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def columns(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for table, column in self.conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND is_generated = 'NEVER' ORDER BY ordinal_position",
            (self.schema,),
        ):
            found.setdefault(str(table), []).append(str(column))
        return found

    def count(self, table: str) -> int:
        row = self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0

    def read(self, table: str, cols: Sequence[str], batch: int) -> Iterator[list[tuple[Any, ...]]]:
        with self.conn.cursor(name=f"rail_copy_{table}") as cur:
            cur.itersize = batch
            cur.execute(f"SELECT {', '.join(cols)} FROM {table}")
            while rows := cur.fetchmany(batch):
                yield [tuple(r) for r in rows]

    def clear(self, tables: Sequence[str]) -> None:
        if tables:
            self.conn.execute(f"TRUNCATE {', '.join(tables)}")

    def write(self, table: str, cols: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        with (
            self.conn.cursor() as cur,
            cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)

    def finish(self) -> None:
        # Generated keys keep their values: move each identity sequence past the largest.
        identity = self.conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND is_identity = 'YES'",
            (self.schema,),
        ).fetchall()
        for table, column in identity:
            self.conn.execute(
                f"SELECT setval(pg_get_serial_sequence(%s, %s), "
                f"coalesce(max({column}), 1), max({column}) IS NOT NULL) FROM {table}",
                (f"{self.schema}.{table}", column),
            )
        self.conn.commit()

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.rollback()
            self.conn.close()


# -- opening -------------------------------------------------------------------------------------
def _kind(url: str, what: str) -> str:
    if url.startswith(("postgresql://", "postgres://")):
        return "postgres"
    if url.startswith("sqlite://") or url.startswith(("/", ".")):
        path, _ = parse_sqlite_url(url)
        if path == ":memory:":
            raise ConfigError(f"{what}: an in-memory rail can't be copied ({mask_url(url)!r})")
        return "sqlite"
    raise ConfigError(
        f"{what}: {url.split('://', 1)[0]!r} is no rail this copies "
        "(give sqlite:///path.db or postgresql://user@host/db)"
    )


async def _pg_source_exists(url: str) -> None:
    """Refuse a PostgreSQL source with no rail in its schema (opening would create one)."""
    import psycopg

    from tracker_client.postgres.options import parse_postgres_url

    conninfo, pg, _shared, shown = parse_postgres_url(url, {})

    def look() -> bool:
        with psycopg.connect(conninfo, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", (f"{pg.schema}.backlog_schema",)
            ).fetchone()
            return bool(row and row[0])

    try:
        found = await anyio.to_thread.run_sync(look)
    except psycopg.Error as exc:
        from tracker_client.postgres.db import map_pg_error

        raise map_pg_error(exc, f"opening {shown}") from None
    if not found:
        raise NoRail(f"source {shown}: no rail in schema {pg.schema!r} (nothing to copy)")


async def _open(url: str, what: str, *, write: bool) -> _Side:
    kind = _kind(url, what)
    if not write:
        if kind == "sqlite":
            path, _ = parse_sqlite_url(url)
            if not await anyio.to_thread.run_sync(Path(path).is_file):
                raise NoRail(f"{what}: no rail file at {path} (nothing to copy)")
        else:
            await _pg_source_exists(url)
    if kind == "sqlite":
        tracker = await open_tracker(url)  # creates (target) and migrates (both)
        await tracker.aclose()
        path, _ = parse_sqlite_url(url)
        shown = mask_url(path)
        return await anyio.to_thread.run_sync(lambda: _SqliteSide(path, shown, write=write))
    import psycopg

    from tracker_client.postgres.tracker import PostgresTracker

    rail = await PostgresTracker.open(url)  # creates (target) and migrates (both)
    try:
        shown, db = mask_url(rail.path), rail.engine.db
    finally:
        await rail.aclose()

    try:
        return await anyio.to_thread.run_sync(lambda: _PgSide(db, shown, write=write))
    except psycopg.Error as exc:  # libpq's reason, never the connection string
        from tracker_client.postgres.db import map_pg_error

        raise map_pg_error(exc, f"opening {shown}") from None


# -- the copy ------------------------------------------------------------------------------------
def _plan(source: _Side, target: _Side) -> list[tuple[str, list[str]]]:
    have, want = source.columns(), target.columns()
    shared = [t for t in have if t in want and t not in _SKIP]
    tables = [t for t in ORDER if t in shared] + sorted(t for t in shared if t not in ORDER)
    return [(t, [c for c in have[t] if c in set(want[t])]) for t in tables]


def _lapse(cols: list[str], now_ms: int) -> Callable[[tuple[Any, ...]], tuple[Any, bool]]:
    at = cols.index("lease_expires_at_ms") if "lease_expires_at_ms" in cols else -1

    def fix(row: tuple[Any, ...]) -> tuple[Any, bool]:
        if at < 0 or not isinstance(row[at], int) or row[at] <= now_ms:
            return row, False
        return (*row[:at], now_ms, *row[at + 1 :]), True

    return fix


def _copy(source: _Side, target: Any, force: bool, batch: int, now_ms: int) -> CopyReport:
    plan = _plan(source, target)
    tables = [t for t, _ in plan]
    held = {t: n for t in tables if (n := target.count(t))}
    if held and not force:
        listed = ", ".join(f"{t} ({n})" for t, n in held.items())
        raise RailNotEmpty(
            f"target {target.shown} is not empty: {listed}; nothing written "
            "(--force replaces its rows with the source's)"
        )
    if held:
        target.clear(tables)
    counts = {t: source.count(t) for t in tables}
    lapsed = 0
    for table, cols in plan:
        fix = _lapse(cols, now_ms) if table == "tasks" else None
        for rows in source.read(table, cols, batch):
            if fix is not None:
                fixed = [fix(r) for r in rows]
                lapsed += sum(1 for _, changed in fixed if changed)
                rows = [r for r, _ in fixed]
            target.write(table, cols, rows)
    for table in tables:
        got = target.count(table)
        if got != counts[table]:
            raise CopyFailed(
                f"table {table}: {counts[table]} row(s) in the source, {got} in the target; "
                "nothing written"
            )
    target.finish()
    return CopyReport(source.shown, target.shown, counts, held, lapsed)


async def copy_rail(
    source_url: str,
    target_url: str,
    *,
    force: bool = False,
    batch_size: int = DEFAULT_BATCH,
    now_ms: int | None = None,
) -> CopyReport:
    """Copy the rail at ``source_url`` into the rail at ``target_url`` (see the module doc).

    ``ConfigError`` for a bad URL or option (naming which), ``NoRail`` for a source that does
    not exist, :class:`RailNotEmpty` for a target with rows and no ``force``,
    :class:`CopyFailed` when a table's counts differ; in every case nothing is written.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch size: a positive integer, got {batch_size!r}")
    kinds = {_kind(source_url, "source"), _kind(target_url, "target")}
    if "postgres" in kinds:  # the driver is imported here, not when the module is
        require("postgres", "rail copy to or from postgresql://")
    if _identity(source_url) == _identity(target_url):
        raise ConfigError("source and target are the same rail: nothing to copy")
    source = await _open(source_url, "source", write=False)
    try:
        target = await _open(target_url, "target", write=True)
        try:
            when = int(time.time() * 1000) if now_ms is None else now_ms
            try:
                return await anyio.to_thread.run_sync(
                    lambda: _copy(source, target, force, batch_size, when)
                )
            except Exception as exc:
                if isinstance(exc, BacklogWorkerError):
                    raise
                raise CopyFailed(f"copy to {target.shown} failed, nothing written: {exc}") from exc
        finally:
            await anyio.to_thread.run_sync(target.close)
    finally:
        await anyio.to_thread.run_sync(source.close)


def _identity(url: str) -> tuple[str, ...]:
    """Which rail ``url`` names (engine, place, schema), to refuse copying a rail onto itself."""
    if _kind(url, "rail") == "sqlite":
        path, _ = parse_sqlite_url(url)
        return ("sqlite", str(Path(path).resolve()))
    import psycopg

    from tracker_client.postgres.options import parse_postgres_url

    conninfo, pg, _shared, _shown = parse_postgres_url(url, {})
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    where = [str(given.get(k, "")) for k in ("host", "port", "dbname")]
    return ("postgres", *where, pg.schema)
