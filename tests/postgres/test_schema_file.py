"""The PostgreSQL rail's schema: ``schema.sql`` (the current state, functions included; a new
rail's) and the numbered migrations (history, each a diff) never drift apart.

A new rail is created from ``schema.sql`` in one step; an older rail is brought up by the
migrations it lacks (:func:`~tracker_client.postgres.migrate.migrate`, the real code path). Both
must end in the same schema, compared on the catalog: every table's columns (type, nullability,
default, identity, generated expression, in order), constraints and indexes
(``pg_get_constraintdef``, ``pg_indexes``), relations (sequences too), and each function's
``pg_get_functiondef`` (so a function is its last ``CREATE OR REPLACE``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tracker_client.factory import open_tracker
from tracker_client.postgres.migrate import SCHEMA_VERSION, current_schema, migrate, migrations

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: migrate()'s own bookkeeping (the same statement on both paths): compared by its rows.
BOOKKEEPING = "backlog_schema"


def _snapshot(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """The schema's catalog, its name replaced by ``<schema>`` (two schemas compare equal)."""
    queries = {
        "columns": (
            "SELECT table_name, ordinal_position, column_name, data_type, udt_name, is_nullable,"
            " column_default, is_identity, identity_generation, is_generated,"
            " generation_expression FROM information_schema.columns"
            " WHERE table_schema = %(s)s AND table_name <> %(skip)s"
            " ORDER BY table_name, ordinal_position"
        ),
        "constraints": (
            "SELECT cl.relname, c.conname, c.contype, pg_get_constraintdef(c.oid)"
            " FROM pg_constraint c JOIN pg_class cl ON cl.oid = c.conrelid"
            " JOIN pg_namespace n ON n.oid = cl.relnamespace"
            " WHERE n.nspname = %(s)s AND cl.relname <> %(skip)s ORDER BY 1, 2"
        ),
        "indexes": (
            "SELECT tablename, indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = %(s)s AND tablename <> %(skip)s ORDER BY 1, 2"
        ),
        "relations": (
            "SELECT cl.relname, cl.relkind FROM pg_class cl"
            " JOIN pg_namespace n ON n.oid = cl.relnamespace"
            " WHERE n.nspname = %(s)s AND cl.relname NOT LIKE %(skip_like)s ORDER BY 1"
        ),
        "functions": (
            "SELECT p.proname, pg_get_function_identity_arguments(p.oid),"
            " pg_get_functiondef(p.oid) FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s ORDER BY 1, 2"
        ),
    }
    params = {"s": schema, "skip": BOOKKEEPING, "skip_like": BOOKKEEPING + "%"}
    found: dict[str, list[tuple[Any, ...]]] = {}
    for what, query in queries.items():
        rows = conn.execute(query.encode(), params).fetchall()
        found[what] = [
            tuple(v.replace(schema, "<schema>") if isinstance(v, str) else v for v in row)
            for row in rows
        ]
    found["versions"] = conn.execute(
        sql.SQL(
            "SELECT version, name FROM {0}.backlog_schema UNION ALL "
            "SELECT version, name FROM {0}.backlog_schema_additions ORDER BY version"
        ).format(sql.Identifier(schema))
    ).fetchall()
    return found


def _differences(
    one: dict[str, list[tuple[Any, ...]]], two: dict[str, list[tuple[Any, ...]]]
) -> list[str]:
    out = []
    for what in sorted(set(one) | set(two)):
        a, b = set(one.get(what, [])), set(two.get(what, []))
        out += [f"{what}: only in the first: {row!r}" for row in sorted(a - b, key=repr)]
        out += [f"{what}: only in the second: {row!r}" for row in sorted(b - a, key=repr)]
        if not out and one.get(what) != two.get(what):
            out.append(f"{what}: the same rows in another order")
    return out


def _at_version(conn: psycopg.Connection[Any], schema: str, version: int) -> None:
    """A rail left at ``version`` by an older build: migrations 1..version applied and
    recorded, as that build's migrate() did."""
    ident = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        conn.execute(
            b"CREATE TABLE backlog_schema (version integer PRIMARY KEY, name text NOT NULL, "
            b"applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for number, name, text in migrations():
            if number <= version:
                conn.execute(text.encode())
                conn.execute(
                    b"INSERT INTO backlog_schema (version, name) VALUES (%s, %s)", (number, name)
                )


async def _new_rail(pg_server: PgServer) -> str:
    key = f"schema-file-{uuid.uuid4()}"
    tracker = await open_tracker(fresh_schema_url(key))
    await tracker.aclose()
    return schema_name(key)


async def test_schema_sql_is_every_migration_applied_from_empty(pg_server: PgServer) -> None:
    created = await _new_rail(pg_server)
    migrated = "migrated_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        _at_version(conn, migrated, 1)
        assert migrate(conn, migrated) == SCHEMA_VERSION - 1
        whole, stepped = _snapshot(conn, created), _snapshot(conn, migrated)
    assert _differences(whole, stepped) == [], (
        "tracker_client/postgres/schema/schema.sql differs from the numbered migrations applied "
        "in order: a schema change is a new migration AND the same change in schema.sql"
    )
    names = {row[0] for row in whole["functions"]}
    assert {"bw_claim_one", "bw_claim", "bw_grant", "bw_candidates", "bw_wake"} <= names
    assert whole["versions"] == [(n, name) for n, name, _ in migrations()]


@pytest.mark.parametrize(
    "change",
    [
        "DROP INDEX {s}.tasks_free",
        "ALTER TABLE {s}.runs ADD COLUMN extra TEXT",
        "CREATE OR REPLACE FUNCTION {s}.bw_wake(p_notify TEXT, p_follow TEXT, p_instance TEXT)"
        " RETURNS VOID LANGUAGE plpgsql AS $$ BEGIN END $$",
    ],
)
async def test_the_comparison_sees_a_schema_that_drifted(pg_server: PgServer, change: str) -> None:
    one, two = await _new_rail(pg_server), await _new_rail(pg_server)
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        assert _differences(_snapshot(conn, one), _snapshot(conn, two)) == []
        conn.execute(change.format(s=f'"{two}"').encode())
        assert _differences(_snapshot(conn, one), _snapshot(conn, two)) != []


async def test_a_new_rail_is_created_from_schema_sql_in_one_step(
    pg_server: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="backlog_worker.tracker")
    await _new_rail(pg_server)
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions.count("schema_created") == 1
    assert "schema_migrated" not in actions
    assert "CREATE FUNCTION bw_claim_one(" in current_schema()
    assert "CREATE OR REPLACE FUNCTION" not in current_schema()  # each function once


@pytest.mark.parametrize("version", [3, SCHEMA_VERSION - 1])
async def test_an_older_rail_is_brought_up_by_the_migrations_it_lacks(
    pg_server: PgServer, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    schema = "older_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        _at_version(conn, schema, version)
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.pipelines (id, name, definition, created_at_ms)"
                " VALUES ('p1', 'kept', '{{}}', 1)"
            ).format(sql.Identifier(schema))
        )
    caplog.set_level(logging.INFO, logger="backlog_worker.tracker")
    tracker = await open_tracker(f"{pg_server.url}?schema={schema}")
    await tracker.aclose()
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions.count("schema_migrated") == SCHEMA_VERSION - version
    assert "schema_created" not in actions
    created = await _new_rail(pg_server)
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        assert _differences(_snapshot(conn, created), _snapshot(conn, schema)) == []
        kept = conn.execute(
            sql.SQL("SELECT name FROM {}.pipelines").format(sql.Identifier(schema))
        ).fetchall()
    assert kept == [("kept",)]
