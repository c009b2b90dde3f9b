"""The test server itself: it starts as an unprivileged user, answers, restarts on its port."""

from __future__ import annotations

import os

import pytest

from tests.postgres.server import PgServer, require_postgres

pytestmark = pytest.mark.timeout(120)


def test_server_answers_on_loopback(pg_server: PgServer) -> None:
    import psycopg

    with psycopg.connect(pg_server.url) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
        addr = conn.execute("SELECT inet_server_addr()::text").fetchone()
    assert version is not None and version[0]
    assert fsync == ("off",)
    assert addr is not None and addr[0].startswith("127.0.0.1")


def test_server_restarts_with_its_data() -> None:
    import psycopg

    server = PgServer.create(require_postgres())
    try:
        server.start()
        pid = server.proc.pid if server.proc else 0
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n int)")
            conn.execute("INSERT INTO kept VALUES (7)")
        server.restart()
        assert server.proc is not None and server.proc.pid != pid
        with psycopg.connect(server.url) as conn:
            assert conn.execute("SELECT n FROM kept").fetchall() == [(7,)]
        if os.geteuid() == 0:
            owner = os.stat(server.datadir).st_uid
            assert owner != 0, "the data dir must belong to the unprivileged server user"
    finally:
        server.destroy()
    assert not server.root.exists()
