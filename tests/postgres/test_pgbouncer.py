"""The PostgreSQL rail behind a real PgBouncer (1.18) in transaction pooling mode
(``?pgbouncer=transaction``, docs/operate/postgresql.md): worker processes drain a rail through
it exactly once; the wake-up listener takes the direct address (``listen_host``/``listen_port``)
while the data goes through the bouncer; without one, waiters poll and still pick work up; and
each misconfiguration is a clear error."""

from __future__ import annotations

import uuid
from functools import partial

import anyio
import pytest

from tests.contract.support import claim, make_pipeline, new_task
from tests.docs.blocks import find
from tests.postgres.bouncer import Bouncer, start_bouncer
from tests.postgres.drain_hosts import spawn
from tests.postgres.server import PgServer, schema_name
from tests.startline import reap, release_together
from tracker_client.errors import ConfigError
from tracker_client.factory import open_tracker
from tracker_client.postgres.engine import PgEngine
from tracker_client.postgres.options import parse_postgres_url
from tracker_client.postgres.tracker import PostgresTracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

WORKERS = 3
TASKS = 300


def _url(bouncer: Bouncer, key: str, **options: object) -> str:
    query = {"schema": schema_name(key), "pgbouncer": "transaction", **options}
    return bouncer.url + "?" + "&".join(f"{k}={v}" for k, v in query.items())


def _engine(tracker: object) -> PgEngine:
    assert isinstance(tracker, PostgresTracker)
    engine = tracker._engine
    assert isinstance(engine, PgEngine)
    return engine


def _drain(url: str) -> list[str]:
    """WORKERS drain processes (tests/postgres/_drain_proc.py) at once; their output lines."""
    procs = [spawn("drain", url, f"host-{n}") for n in range(WORKERS)]
    lines: list[str] = []
    try:
        release_together(procs)
        for proc in procs:
            out, err = proc.communicate(timeout=100)
            assert proc.returncode == 0, err[-2000:]
            lines += out.splitlines()
        return lines
    finally:
        reap(procs)


async def test_worker_processes_drain_through_the_bouncer_exactly_once(
    pg_server: PgServer, pgbouncer: Bouncer
) -> None:
    key = f"bouncer-{uuid.uuid4()}"
    url = _url(pgbouncer, key, pool_size=2)
    tracker = await open_tracker(url)
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(TASKS)])
    finally:
        await tracker.aclose()
    before = pgbouncer.transactions()

    lines = await anyio.to_thread.run_sync(_drain, url)

    done = [line.split()[1] for line in lines if line.startswith("done ")]
    assert len(done) == TASKS and len(set(done)) == TASKS
    assert pgbouncer.transactions() - before >= TASKS  # every claim and finish went through it
    import psycopg

    schema = schema_name(key)
    with psycopg.connect(pg_server.url) as conn:
        stages = conn.execute(f"SELECT stage, count(*) FROM {schema}.tasks GROUP BY stage")
        assert dict(stages.fetchall()) == {"done": TASKS}
        twice = conn.execute(
            f"SELECT task_id FROM {schema}.runs WHERE status = 'completed' "
            "GROUP BY task_id HAVING count(*) <> 1"
        ).fetchall()
        assert twice == []


async def test_the_listener_takes_the_direct_address_while_data_goes_through_the_bouncer(
    pg_server: PgServer, pgbouncer: Bouncer
) -> None:
    key = f"bouncer-listen-{uuid.uuid4()}"
    idle = await open_tracker(_url(pgbouncer, key, listen_port=pg_server.port))
    writer = await open_tracker(_url(pgbouncer, key))
    try:
        pid = await make_pipeline(writer)
        seen = await idle.wait_for_work(0.01)  # the listener is up from here on
        engine = _engine(idle)
        listener = engine._listener
        assert listener is not None and listener.healthy
        before = engine._changes.seq
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(idle.wait_for_work, 60.0, since=seen))
            await writer.create_task(new_task(pid, "new work"))
        # Woken by the NOTIFY the bouncer's transaction sent, through the direct LISTEN.
        assert engine._changes.seq > before
        lease = await claim(idle)
        assert lease.task.title == "new work"
    finally:
        await idle.aclose()
        await writer.aclose()


async def test_without_a_direct_address_waiters_poll_and_still_pick_work_up(
    pg_server: PgServer, pgbouncer: Bouncer
) -> None:
    key = f"bouncer-poll-{uuid.uuid4()}"
    idle = await open_tracker(_url(pgbouncer, key, poll_interval_s=0.2))
    writer = await open_tracker(_url(pgbouncer, key))
    try:
        pid = await make_pipeline(writer)
        engine = _engine(idle)
        assert await engine._tick(1.0) == 0.2  # the bound: poll_interval_s
        assert await engine._following.interest(1.0) == 0.2  # a follower polls too
        with engine.db.pool.connection() as conn:  # nothing prepared on a server connection
            assert conn.prepare_threshold is None
        assert engine.db.lane is None
        seen = await idle.wait_for_work(0.01)
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(idle.wait_for_work, 60.0, since=seen))
            await writer.create_task(new_task(pid, "polled"))
        assert engine._listener is None  # no LISTEN went through the bouncer
        lease = await claim(idle)
        assert lease.task.title == "polled"
    finally:
        await idle.aclose()
        await writer.aclose()


async def test_the_bouncer_without_the_option_names_it(pgbouncer: Bouncer) -> None:
    url = f"{pgbouncer.url}?schema={schema_name(f'bouncer-bad-{uuid.uuid4()}')}"
    with pytest.raises(ConfigError, match=r"pgbouncer=transaction"):
        await open_tracker(url)


def test_a_listen_address_equal_to_the_bouncer_is_refused() -> None:
    url = "postgresql://u:secret@127.0.0.1:6432/db?pgbouncer=transaction&listen_port=6432"
    with pytest.raises(ConfigError, match=r"not the PgBouncer") as info:
        parse_postgres_url(url, {})
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("pgbouncer=statement", "pgbouncer"),
        ("pgbouncer=transaction&listen_port=0", "listen_port"),
        ("pgbouncer=transaction&listen_host=", "listen_host"),
    ],
)
def test_bad_bouncer_options_are_named(query: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_postgres_url(f"postgresql://u@127.0.0.1:6432/db?{query}", {})


def test_the_listen_address_keeps_the_credentials_and_database() -> None:
    url = (
        "postgresql://u:pw@127.0.0.1:6432/db?pgbouncer=transaction&listen_port=5432&sslmode=disable"
    )
    conninfo, opts, _shared, shown = parse_postgres_url(url, {})
    assert opts.pgbouncer == "transaction"
    assert opts.listen_conninfo is not None
    import psycopg

    listen = psycopg.conninfo.conninfo_to_dict(opts.listen_conninfo)
    assert (listen["port"], listen["user"], listen["dbname"]) == ("5432", "u", "db")
    assert listen["sslmode"] == "disable" and listen["password"] == "pw"
    assert "pw" not in shown
    assert psycopg.conninfo.conninfo_to_dict(conninfo)["port"] == "6432"
    plain = parse_postgres_url("postgresql://u@h:6432/db?pgbouncer=transaction", {})[1]
    assert plain.listen_conninfo is None
    direct = parse_postgres_url("postgresql://u@h:6432/db", {})[1]
    assert direct.listen_conninfo == ""


async def test_the_pages_example_config_pools_a_rail(pg_server: PgServer) -> None:
    """docs/operate/postgresql.md's PgBouncer ini (addresses and auth replaced by the test's)
    runs, in transaction mode, and a rail opened through it with the page's options works."""
    page = find("docs/operate/postgresql.md", lang="ini", after="## PgBouncer")
    assert "pool_mode = transaction" in page.body
    bouncer = start_bouncer(pg_server, page.body)
    try:
        key = f"bouncer-doc-{uuid.uuid4()}"
        query = f"schema={schema_name(key)}&pgbouncer=transaction&listen_port={pg_server.port}"
        tracker = await open_tracker(f"{bouncer.url_of('work')}?{query}")
        try:
            pid = await make_pipeline(tracker)
            await tracker.create_task(new_task(pid, "via the page's bouncer"))
            lease = await claim(tracker)
            await tracker.transition(lease, "complete")
            assert await tracker.call("count_tasks", stage="todo") == 0
        finally:
            await tracker.aclose()
        assert bouncer.transactions("work") >= 4
    finally:
        bouncer.stop()
