"""The async lane's gathered write on libpq itself (``aio.simple_query``).

A create's statements go as one round trip of the simple query protocol (``BEGIN`` to
``COMMIT``, :class:`~tracker_client.postgres.dialect.OneTrip`). It must do what psycopg's
``execute(query, prepare=False)`` does there: run every statement, raise the server's error as
psycopg raises it (its SQLSTATE, which the rail maps) with the transaction left failed for the
caller's ``ROLLBACK`` and the connection usable after it, and send a script bigger than the
socket takes at once.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tracker_client.postgres.aio import simple_query

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg's async connection (the lane runs only there)


@pytest.fixture
async def conn(
    autocommit_conn: psycopg.AsyncConnection[Any],
) -> psycopg.AsyncConnection[Any]:
    await autocommit_conn.execute("CREATE TEMP TABLE items (id text PRIMARY KEY, body text)")
    return autocommit_conn


async def _ids(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    cur = await conn.execute("SELECT id FROM items ORDER BY id")
    return [row[0] for row in await cur.fetchall()]


async def test_runs_every_statement_in_one_transaction(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    await simple_query(
        conn, b"BEGIN;INSERT INTO items VALUES ('a', '');INSERT INTO items VALUES ('b', '');COMMIT"
    )
    assert await _ids(conn) == ["a", "b"]
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def test_an_error_is_psycopgs_and_the_transaction_rolls_back(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    await simple_query(conn, b"INSERT INTO items VALUES ('a', '')")
    script = b"BEGIN;INSERT INTO items VALUES ('b', '');INSERT INTO items VALUES ('a', '');COMMIT"
    with pytest.raises(psycopg.errors.UniqueViolation) as raised:
        await simple_query(conn, script)
    assert raised.value.sqlstate == "23505"
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    await conn.execute(b"ROLLBACK", prepare=False)
    assert await _ids(conn) == ["a"]  # nothing of the failed script, the connection usable


async def test_a_script_bigger_than_the_socket_takes_at_once(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    body = "x" * (8 << 20)  # well past a loopback socket's send buffer
    await simple_query(conn, f"BEGIN;INSERT INTO items VALUES ('big', '{body}');COMMIT".encode())
    cur = await conn.execute("SELECT length(body) FROM items WHERE id = 'big'")
    assert (await cur.fetchone()) == (len(body),)
