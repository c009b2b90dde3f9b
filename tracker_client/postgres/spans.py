"""OTLP ingest on the PostgreSQL rail (extension ``spans``): the embedded room, batched inserts.

The embedded :mod:`tracker_client.rules.spans` stores a document's spans with one
``executemany``; the PostgreSQL connection face (:class:`~.dialect.PgConn`) has only
``execute``, so ``PostgresTracker.ingest_traces`` hands the rules' function (through
:func:`with_many`) a connection that adds
``executemany`` (psycopg's own, one statement text for every row, in the same transaction).
Blobs are ``bytea`` (schema 2). Everything else (checks, listing, retention) is the embedded
code unchanged. This room writes ``span_batches`` and ``spans`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import psycopg

from tracker_client.postgres.dialect import PgConn, PgCursor
from tracker_client.rules.common import Ctx
from tracker_client.rules.statements import Statement

if TYPE_CHECKING:
    import sqlite3

__all__ = ["with_many"]


class _ManyConn:
    """A :class:`PgConn` with ``executemany`` (what the embedded span insert calls)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: PgConn) -> None:
        self._conn = conn

    @property
    def in_transaction(self) -> bool:
        """Whether the transaction is open (as :class:`PgConn`)."""
        return self._conn.in_transaction

    def execute(self, sql: Statement, params: Sequence[Any] | Mapping[str, Any] = ()) -> PgCursor:
        """One statement, as :meth:`PgConn.execute`."""
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement (PostgreSQL's own, e.g. ``spans.insert``, positional
        placeholders) once per row."""
        batch = [tuple(r) for r in rows]
        if batch:
            self._conn.flush()  # what the dialect still holds goes first, in order
            with psycopg.ClientCursor(self._conn.raw) as cur:
                cur.executemany(sql, batch)


def with_many(ctx: Ctx) -> Ctx:
    """``ctx`` on the same transaction, its connection with ``executemany`` (same log lines)."""
    conn = cast(PgConn, ctx.conn)
    many = Ctx(
        cast("sqlite3.Connection", _ManyConn(conn)), ctx.now, ctx.opts, ctx.pipelines, ctx.sql
    )
    many.logs = ctx.logs
    return many
