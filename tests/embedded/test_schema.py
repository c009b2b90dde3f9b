"""The embedded rail's schema: ``schema.sql`` (the current state, a new rail's) and the numbered
migrations (history, each a diff) never drift apart.

A new rail is created from ``schema.sql`` in one step; an older rail is brought up by the
migrations it lacks. Both must end in the same schema: compared here on ``sqlite_master`` (every
table, index, trigger and the FTS5 table with its shadow tables, their SQL normalised: comments
and layout dropped) and on each table's columns (``PRAGMA table_xinfo``), in order.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path

import pytest

from tracker_client.embedded import EmbeddedTracker
from tracker_client.embedded.migrate import (
    APPLICATION_ID,
    LEVEL,
    SCHEMA_VERSION,
    _statements,
    current_schema,
    migrations,
    recorded,
)

pytestmark = pytest.mark.anyio

Shape = dict[tuple[str, str], object]


def _normal(sql: str | None) -> str:
    """``sql`` without comments and layout: what SQLite keeps of an ALTER-ed table reads the
    same as the table written whole."""
    if sql is None:
        return ""
    text = re.sub(r"--[^\n]*", " ", sql)
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"\s*([(),;])\s*", r"\1", text).strip()


def _shape(conn: sqlite3.Connection) -> Shape:
    """Every schema object by (type, name): its table and normalised SQL; tables' columns too."""
    shape: Shape = {}
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    for kind, name, table, sql in rows:
        if table == "schema_additions":
            continue  # bookkeeping of the compatibility window, like user_version
        shape[(kind, name)] = (table, _normal(sql))
        if kind == "table":
            shape[("columns", name)] = conn.execute(f"PRAGMA table_xinfo('{name}')").fetchall()
    return shape


def _from_schema_sql() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    for statement in _statements(current_schema()):
        conn.execute(statement)
    return conn


def _from_migrations(upto: int = SCHEMA_VERSION) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    for number, _name, sql in migrations():
        if number <= upto:
            for statement in _statements(sql):
                conn.execute(statement)
    return conn


def _differences(one: Shape, two: Shape) -> list[str]:
    return sorted(
        f"{kind} {name}: {one.get((kind, name))!r} != {two.get((kind, name))!r}"
        for kind, name in set(one) | set(two)
        if one.get((kind, name)) != two.get((kind, name))
    )


def test_schema_sql_is_every_migration_applied_from_empty() -> None:
    whole, migrated = _shape(_from_schema_sql()), _shape(_from_migrations())
    assert _differences(whole, migrated) == [], (
        "tracker_client/embedded/schema/schema.sql differs from the numbered migrations applied "
        "in order: a schema change is a new migration AND the same change in schema.sql"
    )
    assert ("table", "tasks") in whole and ("trigger", "store_au") in whole
    assert ("index", "tasks_dedupe") in whole and ("table", "rail_secrets") in whole


@pytest.mark.parametrize(
    "change",
    [
        "DROP INDEX tasks_parent",
        "ALTER TABLE runs ADD COLUMN extra TEXT",
        "CREATE INDEX extra ON tasks (title)",
    ],
)
def test_the_comparison_sees_a_schema_that_drifted(change: str) -> None:
    drifted = _from_schema_sql()
    drifted.execute(change)
    assert _differences(_shape(drifted), _shape(_from_migrations())) != []


def test_a_constraint_changed_in_place_is_seen() -> None:
    text = current_schema().replace(
        "stored TEXT NOT NULL CHECK (stored IN ('json', 'blob'))", "stored TEXT NOT NULL"
    )
    assert text != current_schema()
    conn = sqlite3.connect(":memory:")
    for statement in _statements(text):
        conn.execute(statement)
    found = _differences(_shape(conn), _shape(_from_migrations()))
    assert [line.split(":")[0] for line in found] == ["table span_batches"]


async def test_a_new_rail_is_created_from_schema_sql_in_one_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="backlog_worker.tracker")
    path = tmp_path / "rail.db"
    tracker = await EmbeddedTracker.open(str(path))
    await tracker.aclose()
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions.count("schema_created") == 1
    assert "schema_migrated" not in actions
    conn = sqlite3.connect(path)
    try:
        assert recorded(conn) == (LEVEL, set(range(LEVEL + 1, SCHEMA_VERSION + 1)))
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert _differences(_shape(conn), _shape(_from_schema_sql())) == []
    finally:
        conn.close()


@pytest.mark.parametrize("version", [1, 2, SCHEMA_VERSION - 1])
async def test_an_older_rail_is_brought_up_by_the_migrations_it_lacks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    path = tmp_path / "rail.db"
    conn = sqlite3.connect(path)
    for number, _name, sql in migrations():
        if number <= version:
            for statement in _statements(sql):
                conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(
        "INSERT INTO pipelines (id, name, definition, created_at_ms) VALUES ('p1', 'kept', '{}', 1)"
    )
    conn.commit()
    conn.close()
    caplog.set_level(logging.INFO, logger="backlog_worker.tracker")
    tracker = await EmbeddedTracker.open(str(path))
    await tracker.aclose()
    migrated = [
        r.getMessage() for r in caplog.records if getattr(r, "action", None) == "schema_migrated"
    ]
    assert len(migrated) == SCHEMA_VERSION - version
    assert not [r for r in caplog.records if getattr(r, "action", None) == "schema_created"]
    conn = sqlite3.connect(path)
    try:
        assert recorded(conn) == (LEVEL, set(range(LEVEL + 1, SCHEMA_VERSION + 1)))
        assert conn.execute("SELECT name FROM pipelines").fetchall() == [("kept",)]
        assert _differences(_shape(conn), _shape(_from_schema_sql())) == []
    finally:
        conn.close()
