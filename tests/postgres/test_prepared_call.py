"""The async lane's one-statement call on libpq itself (``aio.prepared_call``).

It must answer what psycopg's ``execute(..., prepare=True)`` answers on the same connection:
the same values (the connection's own dumpers and loaders), the server's errors raised as
psycopg raises them (their SQLSTATE, which the rail maps), a statement prepared once per
connection and parameter types, and a parameter bigger than the socket takes at once.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.postgres.server import PgServer
from tracker_client.postgres.aio import prepared_call
from tracker_client.postgres.dialect import configure_types, row_factory, row_maker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg's async connection (the lane runs only there)


@pytest.fixture
def conn(autocommit_conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]:
    configure_types(autocommit_conn)  # type: ignore[arg-type]
    autocommit_conn.row_factory = row_factory  # type: ignore[assignment]  # as the lane's
    return autocommit_conn


QUERY = (
    "SELECT %s::bigint AS n, %s::text AS s, %s::bigint AS flag, %s::text AS nothing,"
    " %s::jsonb AS doc, (%s::bigint * 2)::numeric AS twice, 1.5::numeric AS half"
)
PARAMS = [7, "zoë", True, None, '{"a": [1, 2]}', 21]


async def test_answers_what_psycopg_answers(conn: psycopg.AsyncConnection[Any]) -> None:
    ours = await prepared_call(conn, QUERY, PARAMS, row_maker)
    cur = await conn.execute(QUERY, PARAMS, prepare=True)
    theirs = await cur.fetchall()
    assert [list(r) for r in ours] == [list(r) for r in theirs]
    row = ours[0]
    assert (row["n"], row["s"], row["flag"], row["nothing"]) == (7, "zoë", 1, None)
    assert row["doc"] == {"a": [1, 2]}
    assert (row["twice"], row["half"]) == (42, 1.5)  # the rail's numeric loader
    assert row.keys() == ["n", "s", "flag", "nothing", "doc", "twice", "half"]


async def test_prepared_once_per_connection_and_types(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    async def ours() -> list[str]:
        cur = await conn.execute(
            "SELECT name FROM pg_prepared_statements WHERE name LIKE '\\_bw\\_hot\\_%%'"
            " ORDER BY name"
        )
        return [row[0] for row in await cur.fetchall()]

    for n in range(3):
        found = await prepared_call(conn, "SELECT %s::bigint + 1", [n], row_maker)
        assert found[0][0] == n + 1
    assert await ours() == ["_bw_hot_0"]
    # another parameter type (None is sent untyped): a statement of its own, same answer
    assert (await prepared_call(conn, "SELECT %s::bigint + 1", [None], row_maker))[0][0] is None
    assert await ours() == ["_bw_hot_0", "_bw_hot_1"]


async def test_a_statements_row_maker_is_made_once(conn: psycopg.AsyncConnection[Any]) -> None:
    """A prepared statement's columns are its own for its life on the connection: its rows'
    maker is made from its first result only, and each row still reads by name."""
    made: list[int] = []

    def counting(result: Any) -> Any:
        made.append(result.nfields)
        return row_maker(result)

    for n in range(3):
        rows = await prepared_call(conn, QUERY, [n, *PARAMS[1:]], counting)
        assert rows[0]["n"] == n and rows[0]["half"] == 1.5
    assert made == [7]
    # another maker for the same statement is asked again (and kept)
    again = await prepared_call(conn, QUERY, PARAMS, row_maker)
    assert again[0]["s"] == "zoë"
    assert made == [7]


async def test_a_server_error_is_psycopgs_with_its_sqlstate(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    with pytest.raises(psycopg.errors.DivisionByZero) as caught:
        await prepared_call(conn, "SELECT 1 / %s::bigint", [0], row_maker)
    assert caught.value.sqlstate == "22012"
    with pytest.raises(psycopg.DatabaseError, match="declined here") as raised:
        await prepared_call(
            conn,
            "DO $$ BEGIN RAISE EXCEPTION 'declined here' USING ERRCODE = 'BW001'; END $$",
            [],
            row_maker,
        )
    assert raised.value.sqlstate == "BW001"
    # the connection is usable after either, its statements still prepared
    assert (await prepared_call(conn, "SELECT 1 / %s::bigint", [1], row_maker))[0][0] == 1
    with pytest.raises(psycopg.errors.UndefinedFunction):
        await prepared_call(conn, "SELECT no_such_function(%s::text)", ["x"], row_maker)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def test_a_parameter_bigger_than_the_socket_takes(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    big = "x" * (8 << 20)  # several socket buffers: libpq flushes it in parts
    found = await prepared_call(conn, "SELECT length(%s::text)", [big], row_maker)
    assert found[0][0] == len(big)


async def test_only_plain_placeholders(conn: psycopg.AsyncConnection[Any]) -> None:
    with pytest.raises(ValueError, match="only %s placeholders"):
        await prepared_call(conn, "SELECT %(name)s::text", ["x"], row_maker)


async def test_a_dropped_connection_is_psycopgs_operational_error(
    pg_server: PgServer, conn: psycopg.AsyncConnection[Any]
) -> None:
    assert (await prepared_call(conn, "SELECT %s::bigint", [1], row_maker))[0][0] == 1
    pid = conn.info.backend_pid
    async with await psycopg.AsyncConnection.connect(pg_server.url, autocommit=True) as other:
        # waits until the backend is gone (up to 5 s: PostgreSQL 14+)
        await other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    with pytest.raises(psycopg.OperationalError):
        await prepared_call(conn, "SELECT %s::bigint", [1], row_maker)
