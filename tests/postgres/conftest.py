"""Fixtures of the PostgreSQL tests: the shared server of this process (see :mod:`.server`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest

from tests.postgres.bouncer import Bouncer, start_bouncer
from tests.postgres.server import PgServer, shared_server
from tracker_client.postgres import aio


@pytest.fixture(scope="session")
def pg_server() -> PgServer:
    """The one real PostgreSQL of the session (skips without binaries; fails so in CI)."""
    return shared_server()


@pytest.fixture
async def autocommit_conn(pg_server: PgServer) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """An async autocommit connection to the shared server (the async lane's kind), closed
    after the test; a test module's own fixture sets it up further."""
    connection = await psycopg.AsyncConnection.connect(pg_server.url, autocommit=True)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
def quiet_tracker_log(caplog: pytest.LogCaptureFixture) -> None:
    """The tracker logger at WARNING: the one-trip paths step aside when it logs at INFO (it
    then wants the queue depth for its lines), so a test of those paths holds whatever an
    earlier test of the same process left the logging at."""
    caplog.set_level(logging.WARNING, logger="backlog_worker.tracker")


@pytest.fixture
def sent_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of each query sent on the async lane (the hot path's connections), in order:
    one ``execute``, ``aio.prepared_call`` or ``aio.simple_query`` is one round trip."""
    queries: list[str] = []
    real = psycopg.AsyncCursor.execute

    async def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        queries.append(str(query))
        return await real(self, query, *args, **kwargs)

    real_prepared = aio.prepared_call

    async def counting_prepared(conn: Any, query: str, *args: Any) -> Any:
        queries.append(query)  # the lane's one-statement calls, on libpq itself
        return await real_prepared(conn, query, *args)

    real_simple = aio.simple_query

    async def counting_simple(conn: Any, query: bytes) -> None:
        queries.append(query.decode())  # the lane's gathered writes (a create's), on libpq
        await real_simple(conn, query)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counting)
    monkeypatch.setattr(aio, "prepared_call", counting_prepared)
    monkeypatch.setattr(aio, "simple_query", counting_simple)
    return queries


@pytest.fixture
def pgbouncer(pg_server: PgServer) -> Iterator[Bouncer]:
    """A real PgBouncer in transaction pooling mode in front of :func:`pg_server` (stopped by
    pid after the test; see :mod:`.bouncer`)."""
    bouncer = start_bouncer(pg_server)
    try:
        yield bouncer
    finally:
        bouncer.stop()
