"""The PostgreSQL rail's own behaviour on a real server: opening, migrations, bad URLs, faults.

The Tracker contract itself runs in ``tests/contract`` (parametrised over this rail too); these
are what only a PostgreSQL rail has: several hosts opening (and migrating) one rail at once,
URL options, schemas that are not ours, a dropped connection, a statement timeout, the stored
lease token, the claim statement.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import anyio
import pytest

from tests.contract.support import claim, make_pipeline, new_task
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tracker_client.errors import ConfigError, TrackerCorrupt, TrackerUnavailable
from tracker_client.factory import open_tracker
from tracker_client.postgres.migrate import SCHEMA_VERSION
from tracker_client.postgres.tracker import PostgresTracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _key() -> str:
    return f"rail-{uuid.uuid4()}"


def _sql(server: PgServer, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        cur = conn.execute(query.encode(), params)
        return list(cur.fetchall()) if cur.description else []


def _schema_exists(server: PgServer, schema: str) -> bool:
    return bool(_sql(server, "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)))


async def test_several_hosts_opening_at_once_migrate_once(pg_server: PgServer) -> None:
    key = _key()
    url = fresh_schema_url(key)
    opened: list[PostgresTracker] = []

    async def open_one() -> None:
        opened.append(await PostgresTracker.open(url))

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(open_one)
        assert len(opened) == 8
        pid = await make_pipeline(opened[0])
        await opened[3].create_task(new_task(pid))
        assert (await claim(opened[7])).task.pipeline_id == pid
    finally:
        for tracker in opened:
            await tracker.aclose()
    versions = _sql(
        pg_server,
        f"SELECT version FROM {schema_name(key)}.backlog_schema UNION ALL "
        f"SELECT version FROM {schema_name(key)}.backlog_schema_additions ORDER BY version",
    )
    assert versions == [(n,) for n in range(1, SCHEMA_VERSION + 1)]


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("schema", "Bad-Name", "schema"),
        ("pool_size", "0", "pool_size"),
        ("pool_size", "many", "pool_size"),
        ("statement_timeout_ms", "-1", "statement_timeout_ms"),
        ("max_backlog_depth", "-5", "max_backlog_depth"),
        ("no_such_option", "1", "no_such_option"),
    ],
)
async def test_a_bad_url_option_is_refused_naming_it(
    pg_server: PgServer, option: str, value: str, named: str
) -> None:
    schema = "never_" + uuid.uuid4().hex[:12]
    query = f"schema={schema}&{option}={value}" if option != "schema" else f"schema={value}"
    with pytest.raises(ConfigError) as err:
        await open_tracker(f"{pg_server.url}?{query}")
    assert named in str(err.value)
    assert not _schema_exists(pg_server, schema)  # nothing written


async def test_a_url_without_a_database_is_refused(pg_server: PgServer) -> None:
    with pytest.raises(ConfigError, match="names no database"):
        await open_tracker(f"postgresql://backlog@127.0.0.1:{pg_server.port}")


async def test_a_password_never_shows_in_the_path_or_errors(pg_server: PgServer) -> None:
    url = fresh_schema_url(_key()).replace("backlog@", "backlog:s3cret-pw@")
    tracker = await open_tracker(url)  # trust auth: the password is not checked
    try:
        assert isinstance(tracker, PostgresTracker)
        assert "s3cret-pw" not in tracker.path
        assert "***" in tracker.path
    finally:
        await tracker.aclose()
    with pytest.raises(ConfigError) as err:
        await open_tracker(url + "&pool_size=0")
    assert "s3cret-pw" not in str(err.value)


async def test_a_schema_of_another_application_is_left_alone(pg_server: PgServer) -> None:
    schema = "other_" + uuid.uuid4().hex[:12]
    _sql(pg_server, f"CREATE SCHEMA {schema}")
    _sql(pg_server, f"CREATE TABLE {schema}.invoices (n int)")
    with pytest.raises(TrackerCorrupt, match="another application"):
        await open_tracker(f"{pg_server.url}?schema={schema}")
    tables = _sql(pg_server, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
    assert tables == [("invoices",)]


async def test_a_schema_of_a_newer_build_is_refused(pg_server: PgServer) -> None:
    key = _key()
    tracker = await open_tracker(fresh_schema_url(key))
    await tracker.aclose()
    _sql(pg_server, f"INSERT INTO {schema_name(key)}.backlog_schema VALUES (999, 'future.sql')")
    with pytest.raises(TrackerCorrupt, match="newer backlog-worker"):
        await open_tracker(fresh_schema_url(key))


async def test_an_unreachable_server_is_unavailable() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    with anyio.fail_after(30), pytest.raises(TrackerUnavailable):
        await open_tracker(f"postgresql://backlog@127.0.0.1:{port}/postgres?schema=x")


async def test_a_dropped_connection_is_unavailable_then_recovers(pg_server: PgServer) -> None:
    app = "drop" + uuid.uuid4().hex[:10]
    tracker = await open_tracker(fresh_schema_url(_key(), application_name=app, pool_size=1))
    try:
        pid = await make_pipeline(tracker)
        killed = _sql(
            pg_server,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (app,),
        )
        assert killed and all(ok for (ok,) in killed)
        with pytest.raises(TrackerUnavailable) as err:
            await tracker.create_task(new_task(pid))
        assert err.value.code == "unavailable"
        assert await tracker.create_task(new_task(pid))  # the pool opened a new connection
        assert len((await tracker.list_tasks()).items) == 1
    finally:
        await tracker.aclose()


async def test_a_statement_timeout_grants_no_lease(pg_server: PgServer) -> None:
    import psycopg

    key = _key()
    tracker = await open_tracker(fresh_schema_url(key, statement_timeout_ms=300))
    try:
        pid = await make_pipeline(tracker)
        tid = await tracker.create_task(new_task(pid))
        lock = f"backlog-worker:write:{schema_name(key)}"
        with psycopg.connect(pg_server.url) as holder:
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (lock,))
            with pytest.raises(TrackerUnavailable) as err:
                await tracker.claim("a", "coder", 60_000)
            assert err.value.code == "timeout"
            holder.rollback()
        assert await tracker.list_runs(tid) == []
        lease = await claim(tracker)
        assert lease.task.id == tid and lease.run.attempt == 1
    finally:
        await tracker.aclose()


async def test_the_lease_token_is_stored_as_its_sha256_only(pg_server: PgServer) -> None:
    key = _key()
    tracker = await open_tracker(fresh_schema_url(key))
    try:
        await tracker.create_task(new_task(await make_pipeline(tracker)))
        lease = await claim(tracker)
        token = lease.lease_token.get_secret_value()
        rows = _sql(
            pg_server, f"SELECT t::text, lease_token_sha256 FROM {schema_name(key)}.tasks t"
        )
        assert rows[0][1] == hashlib.sha256(token.encode()).hexdigest()
        assert all(token not in text for text, _ in rows)
        runs = _sql(pg_server, f"SELECT r::text FROM {schema_name(key)}.runs r")
        assert all(token not in text for (text,) in runs)
    finally:
        await tracker.aclose()


async def test_two_instances_never_claim_one_task_twice(pg_server: PgServer) -> None:
    url = fresh_schema_url(_key(), pool_size=4)
    first, second = await open_tracker(url), await open_tracker(url)
    try:
        pid = await make_pipeline(first)
        created = await first.create_tasks([new_task(pid, f"t{i}") for i in range(60)])
        got: list[str] = []

        async def drain(tracker: Any, agent: str) -> None:
            while (lease := await tracker.claim(agent, "coder", 60_000)) is not None:
                got.append(lease.task.id)
                await tracker.transition(lease, "complete")

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(drain, first, f"a{n}")
                tg.start_soon(drain, second, f"b{n}")
        assert sorted(got) == sorted(created)
    finally:
        await first.aclose()
        await second.aclose()


async def test_every_extension_of_the_contract_is_declared(pg_server: PgServer) -> None:
    # spans, workers and follow were the last missing ones (tests/contract runs them here).
    from tracker_client.contract import table as contract
    from tracker_client.postgres.tracker import MISSING_EXTENSIONS

    tracker = await open_tracker(fresh_schema_url(_key()))
    try:
        caps = await tracker.capabilities()
        assert not MISSING_EXTENSIONS
        assert caps.extensions == frozenset(contract.EXTENSIONS)
        assert await tracker.call("list_spans", "some-task") == []
    finally:
        await tracker.aclose()


async def test_concurrent_claims_hold_one_lease_per_concurrency_key(pg_server: PgServer) -> None:
    # Claims of several instances run at once (the write lock in shared mode); a second lease on
    # one key is refused by the unique index and that claim runs again alone.
    url = fresh_schema_url(_key(), pool_size=4)
    first, second = await open_tracker(url), await open_tracker(url)
    try:
        pid = await make_pipeline(first)
        keyed = [
            new_task(pid, f"k{n}-{i}", concurrency_key=f"key-{n}")
            for n in range(4)
            for i in range(10)
        ]
        await first.create_tasks([*keyed, *(new_task(pid, f"free-{i}") for i in range(10))])
        leases: list[Any] = []

        async def grab(tracker: Any, agent: str) -> None:
            while (lease := await tracker.claim(agent, "coder", 60_000)) is not None:
                leases.append(lease)

        async with anyio.create_task_group() as tg:
            for n in range(4):
                tg.start_soon(grab, first, f"a{n}")
                tg.start_soon(grab, second, f"b{n}")
        keys = [lease.task.concurrency_key for lease in leases]
        assert sorted(k for k in keys if k) == [f"key-{n}" for n in range(4)]
        assert keys.count(None) == 10
        assert len({lease.task.id for lease in leases}) == len(leases) == 14
        # The key frees when its lease ends: the next task of that key is claimable then.
        done = next(lease for lease in leases if lease.task.concurrency_key == "key-0")
        await first.transition(done, "complete")
        again = await claim(second, agent="c")
        assert again.task.concurrency_key == "key-0" and again.task.id != done.task.id
    finally:
        await first.aclose()
        await second.aclose()
