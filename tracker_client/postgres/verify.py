"""``rail verify postgresql://...``: the rail's invariants on a PostgreSQL rail or a restore of one.

PostgreSQL's backups are its own (``pg_dump``/``pg_restore``, docs/operate/backups-retention.md);
this checks that what a restore brought back is a rail whose work is whole: the schema is ours
and not newer than this build, then every invariant of :mod:`tracker_client.rules.verify`, in
one read-only repeatable-read transaction (one snapshot), with this engine's statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from tracker_client.errors import ConfigError
from tracker_client.postgres.dialect import STATEMENTS
from tracker_client.postgres.migrate import schema_version
from tracker_client.postgres.options import parse_postgres_url
from tracker_client.rules.verify import VerifyReport, check_invariants, count_rows

__all__ = ["verify_url"]


def verify_url(url: str) -> VerifyReport:
    """Check the PostgreSQL rail at ``url`` without writing to it. Errors are psycopg's (the
    caller maps them)."""
    conninfo, pg, _shared, shown = parse_postgres_url(url, {})
    with psycopg.connect(conninfo, autocommit=True, application_name="backlog-worker") as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            version = schema_version(conn, pg.schema)
            if version == 0:
                raise ConfigError(f"{shown}: schema {pg.schema!r} holds no rail")
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(pg.schema)))

            def rows_of(name: str) -> Sequence[Sequence[Any]]:
                return conn.execute(STATEMENTS[name].encode()).fetchall()

            report = VerifyReport(rail=shown, schema_version=version)
            report.counts = count_rows(rows_of)
            report.problems = check_invariants(rows_of)
        finally:
            conn.execute("ROLLBACK")
    return report
