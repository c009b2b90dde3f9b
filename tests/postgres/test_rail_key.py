"""The rail's lease-token key is made by the server, so no statement a client sends holds it:
a server logging every statement with its parameters (``log_statement = all``, as an operator
debugging a rail may set) never logs the key (tracker_client/postgres/migrate.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import psycopg
import pytest

from tests.contract.support import make_pipeline, new_task
from tests.postgres.server import PgServer
from tracker_client.factory import open_tracker
from tracker_client.postgres.dialect import STATEMENTS
from tracker_client.rules.leasekeys import KEY_NAME

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def logged_db(pg_server: PgServer) -> Iterator[str]:
    """A database of its own whose sessions log every statement with its parameters."""
    name = "logged_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        conn.execute(f"ALTER DATABASE \"{name}\" SET log_statement = 'all'")
    url = pg_server.url.rsplit("/", 1)[0] + "/" + name
    yield url
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _server_log(server: PgServer) -> str:
    return (server.root / "server.log").read_text(errors="replace")


def _key(url: str) -> str:
    with psycopg.connect(url) as conn:
        query = "SELECT value FROM backlog.rail_secrets WHERE name = %s"
        row = conn.execute(query, (KEY_NAME,)).fetchone()
    assert row is not None
    return str(row[0])


async def test_the_key_made_at_open_is_in_no_statement_log(
    pg_server: PgServer, logged_db: str
) -> None:
    mark = len(_server_log(pg_server))
    with anyio.fail_after(30):
        tracker = await open_tracker(logged_db)
        try:
            pid = await make_pipeline(tracker)
            await tracker.create_task(new_task(pid, "keyed"))
            [lease] = await tracker.claim_many("a", "coder", 60_000, 1, idempotency_key="k1")
            await tracker.transition(lease, "complete")
        finally:
            await tracker.aclose()
    key = _key(logged_db)
    assert len(key) == 64 and int(key, 16) >= 0  # 32 bytes, hex, as the rules read it
    logged = _server_log(pg_server)[mark:]
    assert "rail_secrets" in logged and "k1" in logged  # the server did log the statements
    assert key not in logged


def test_a_key_made_again_mixes_in_the_servers_randomness(
    pg_server: PgServer, logged_db: str
) -> None:
    # ``leasekeys.make`` (the rules' path, for a rail whose row was deleted since its open)
    # sends a value from the client: the key stored is not it, and not in the log.
    sent = "ab" * 32
    mark = len(_server_log(pg_server))
    with psycopg.connect(logged_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE rail_secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute(STATEMENTS["leasekeys.make"], (KEY_NAME, sent))
        conn.execute(STATEMENTS["leasekeys.make"], (KEY_NAME, "cd" * 32))  # the first one stays
        rows = conn.execute("SELECT value FROM rail_secrets").fetchall()
    [(key,)] = rows
    assert len(key) == 64 and key != sent
    logged = _server_log(pg_server)[mark:]
    assert sent in logged and key not in logged
