"""A standing claim's grant travels with the create's NOTIFY (tracker_client/postgres/standing.py):
the woken parked claim builds its leases from the rows the create sent on the rail's grant
channel and reads nothing; the leases are the rail's (a replay under the key answers the same,
the token passes the fencing); a grant too large for a NOTIFY, or rows of others, leave the
claim to read its leases as before."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
import pytest

from tests.contract.support import make_pipeline, new_task
from tests.postgres.idle_pair import idle_pair, settle
from tests.postgres.server import PgServer
from tests.worker.conftest import wait_until
from tracker_client.models import Lease, TaskCreate
from tracker_client.postgres import aio
from tracker_client.postgres.standing import GRANT_PAYLOAD_MAX, grant_channel
from tracker_client.postgres.tracker import PostgresTracker
from tracker_client.rules.parked import attempt_key

# a worker's rail writes no task_claimed line (muted at INFO, or WARNING): the one-trip claim
# a standing claim rides on steps aside otherwise (see conftest's ``quiet_tracker_log``)
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quiet_tracker_log"),
]

#: Every parked claim below may wait this long; each test ends well before.
PARK_MS = 20_000
#: What the woken claim sends when it reads its leases (the standing claim's own claim).
STAND_READ = "bw_stand_claim_tx"


@asynccontextmanager
async def _standing_park(idle: PostgresTracker, key: str) -> AsyncIterator[list[Lease]]:
    """One parked claim of ``idle`` under ``key``, in the background; the block starts once it
    stands, and the list holds what it answered when the block has ended."""
    got: list[Lease] = []
    stood = idle._standing.stood
    async with anyio.create_task_group() as tg:

        async def park() -> None:
            got.extend(
                await idle.parked_claim("idle", "coder", 60_000, 1, PARK_MS, idempotency_key=key)
            )

        tg.start_soon(park)
        await wait_until(lambda: idle._standing.stood > stood)
        yield got


@pytest.fixture
async def pair(pg_server: PgServer) -> AsyncIterator[tuple[PostgresTracker, PostgresTracker, str]]:
    """Two instances of a fresh rail (:func:`idle_pair`): the idle one settled (its parked
    claims stand), the writer, and a pipeline with a ``coder`` stage."""
    async with idle_pair(f"grant-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        await settle(idle)
        yield idle, writer, pid


async def test_a_woken_standing_claim_takes_its_grant_from_the_notify(
    pair: tuple[PostgresTracker, PostgresTracker, str], sent_queries: list[str]
) -> None:
    idle, writer, pid = pair
    key = str(uuid.uuid4())
    with anyio.fail_after(10):
        async with _standing_park(idle, key) as got:
            sent_queries.clear()
            task_id = await writer.create_task(new_task(pid, "granted"))
    assert idle._standing.granted == 1
    assert not [q for q in sent_queries if STAND_READ in q]  # nothing read: no round trip
    [lease] = got
    assert lease.task.id == task_id
    # the same lease a replay under the key reads from the rail (the same token)
    [again] = await idle.claim_many("idle", "coder", 60_000, 1, idempotency_key=attempt_key(key, 0))
    assert again.model_dump() == lease.model_dump()
    assert again.lease_token == lease.lease_token
    await idle.heartbeat(lease)  # the token's digest is the rail's: the fencing holds
    await idle.transition(lease, "complete")
    assert (await writer.get_task(task_id)).stage != "todo"


async def test_others_grants_and_too_large_ones_leave_the_claim_to_read(
    pg_server: PgServer, pair: tuple[PostgresTracker, PostgresTracker, str], sent_queries: list[str]
) -> None:
    idle, writer, pid = pair
    key = str(uuid.uuid4())
    assert idle._rail_key is not None
    channel = grant_channel(idle._rail_key)
    big = TaskCreate(
        pipeline_id=pid, title="large", description="x" * GRANT_PAYLOAD_MAX, priority=0
    )
    with anyio.fail_after(10):
        async with _standing_park(idle, key) as got:
            # a grant of someone else's runs, one that does not read, and a row of its own
            # run without a task's columns: passed over
            [(run_id, _, _)] = idle._standing._ids[attempt_key(key, 0)]
            with psycopg.connect(pg_server.url, autocommit=True) as conn:
                for payload in (
                    '[{"lease_run_id": "x"}]',
                    "not json",
                    json.dumps([{"lease_run_id": run_id, "id": "forged"}]),
                ):
                    conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
            sent_queries.clear()
            task_id = await writer.create_task(big)
    assert idle._standing.granted == 0
    assert [q for q in sent_queries if STAND_READ in q]  # read, as before the grants
    [lease] = got
    assert lease.task.id == task_id
    assert lease.task.description == big.description
    await idle.heartbeat(lease)
    await idle.transition(lease, "complete")


@pytest.fixture
def every_statement(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text and parameters of every statement a connection sends (the listener's sync
    connection, the async lane, its one-statement calls and its gathered writes), each as one
    string."""
    sent: list[str] = []
    sync_execute, async_execute = psycopg.Cursor.execute, psycopg.AsyncCursor.execute
    real_prepared = aio.prepared_call

    def on_sync(self: Any, query: Any, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        sent.append(f"{query} {params!r}")
        return sync_execute(self, query, params, *args, **kwargs)

    async def on_async(self: Any, query: Any, params: Any = None, *args: Any, **kw: Any) -> Any:
        sent.append(f"{query} {params!r}")
        return await async_execute(self, query, params, *args, **kw)

    async def on_prepared(conn: Any, query: str, params: Any, *args: Any) -> Any:
        sent.append(f"{query} {params!r}")
        return await real_prepared(conn, query, params, *args)

    real_simple = aio.simple_query

    async def on_simple(conn: Any, query: bytes) -> None:
        sent.append(query.decode())
        await real_simple(conn, query)

    monkeypatch.setattr(psycopg.Cursor, "execute", on_sync)
    monkeypatch.setattr(psycopg.AsyncCursor, "execute", on_async)
    monkeypatch.setattr(aio, "prepared_call", on_prepared)
    monkeypatch.setattr(aio, "simple_query", on_simple)
    return sent


async def test_no_statement_sent_names_the_grant_channel(  # recording before the pair opens
    every_statement: list[str], pair: tuple[PostgresTracker, PostgresTracker, str]
) -> None:
    # A statement's text and parameters show in pg_stat_activity, pg_stat_statements (to a
    # monitoring role) and a server log: a role that learnt the name there could LISTEN and
    # read the tasks granted. The server names the channel itself (schema 23).
    idle, writer, pid = pair
    with anyio.fail_after(10):
        async with _standing_park(idle, str(uuid.uuid4())) as got:
            await writer.create_task(new_task(pid, "granted"))
    assert idle._standing.granted == 1 and len(got) == 1  # the grant came on the channel
    assert idle._rail_key is not None
    channel = grant_channel(idle._rail_key)
    sent = "\n".join(every_statement)
    assert channel not in sent
    assert "bw_listen_grants" in sent and "bw_grant_channel()" in sent  # both sides were seen
