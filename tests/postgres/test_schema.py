"""The PostgreSQL schema keeps up with the embedded one: the shared domain functions write the
embedded rail's columns, so every embedded table and column must exist on PostgreSQL too (an
embedded migration without its PostgreSQL twin fails here, naming what is missing)."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from pathlib import Path

import pytest

from tests.contract.support import claim, make_pipeline, new_task
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tracker_client.embedded import EmbeddedTracker
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _embedded_columns(path: Path) -> dict[str, set[str]]:
    with sqlite3.connect(path) as conn:
        tables = [
            str(r[0])
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not str(r[0]).startswith(("sqlite_", "store_fts", "schema_additions", "wakes"))
        ]
        return {t: {str(c[1]) for c in conn.execute(f"PRAGMA table_info({t})")} for t in tables}


async def test_every_embedded_column_exists_on_postgresql(
    pg_server: PgServer, tmp_path: Path
) -> None:
    import psycopg

    embedded = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    await embedded.aclose()
    wanted = _embedded_columns(tmp_path / "rail.db")
    key = f"schema-{uuid.uuid4()}"
    tracker = await open_tracker(fresh_schema_url(key))
    await tracker.aclose()
    with psycopg.connect(pg_server.url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s",
            (schema_name(key),),
        ).fetchall()
    have: dict[str, set[str]] = {}
    for table, column in rows:
        have.setdefault(str(table), set()).add(str(column))
    missing = sorted(
        f"{table}.{column}"
        for table, columns in wanted.items()
        for column in columns - have.get(table, set())
    )
    assert missing == [], (
        f"embedded columns missing on PostgreSQL: {missing}; add a migration to "
        "tracker_client/postgres/schema/ mirroring the embedded one"
    )


async def test_the_rail_key_is_made_once_at_open_and_shared_by_every_host(
    pg_server: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The one-statement claim derives a keyed claim's token before it is sent: the key exists
    # from the open on, one per rail, read alike by every host (a replay may reach another).
    import psycopg

    caplog.set_level(logging.DEBUG)
    key = f"schema-{uuid.uuid4()}"
    url = fresh_schema_url(key)
    one, two = await open_tracker(url), await open_tracker(url)
    try:
        with psycopg.connect(pg_server.url) as conn:
            rows = conn.execute(
                f"SELECT name, value FROM {schema_name(key)}.rail_secrets"
            ).fetchall()
        assert [r[0] for r in rows] == ["lease_token_key"] and len(rows[0][1]) == 64
        pid = await make_pipeline(one)
        await one.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
        first = await claim(one, idempotency_key="k-hosts")
        again = await claim(two, idempotency_key="k-hosts")  # the retry reached another host
        assert again.lease_token.get_secret_value() == first.lease_token.get_secret_value()
        await two.heartbeat(first)
        await one.heartbeat(again)
    finally:
        await one.aclose()
        await two.aclose()
    secret = str(rows[0][1])
    for record in caplog.records:
        text = record.getMessage() + repr(vars(record))
        assert secret not in text and secret.upper() not in text, record.getMessage()
