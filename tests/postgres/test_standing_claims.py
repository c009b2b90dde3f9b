"""Standing claims (schema 21, tracker_client/postgres/standing.py): an idle parked claim stands
while it sleeps, and the create that brings its work claims for it in the create's own write;
the woken parked claim only reads its leases. Nothing is stranded: a holder that died, a parked
claim stopped or cancelled, two creates racing for one standing claim, a retry under the key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import psycopg
import pytest

from tests.contract.support import make_pipeline, new_task
from tests.postgres.idle_pair import idle_pair, settle
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tests.worker.conftest import wait_until
from tracker_client.factory import open_tracker
from tracker_client.models import Lease
from tracker_client.postgres.tracker import PostgresTracker
from tracker_client.postgres.wake import channel_name, holder_of
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


def _sql(pg: PgServer, key: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    """``query`` on the schema of ``key`` (``{s}`` names it), on a connection of its own.
    Synchronous on purpose: the event loop (and the idle instance's wake-up) waits for it."""
    with psycopg.connect(pg.url, autocommit=True) as conn:
        return conn.execute(query.format(s=f'"{schema_name(key)}"'), params).fetchall()


def _leased_to(pg: PgServer, key: str, task_id: str) -> str | None:
    """The agent of the run holding ``task_id``'s lease now (None: not leased)."""
    rows = _sql(
        pg,
        key,
        "SELECT r.agent_id FROM {s}.tasks t JOIN {s}.runs r ON r.id = t.lease_run_id "
        "WHERE t.id = %s AND t.lease_expires_at_ms > 0",
        task_id,
    )
    return str(rows[0][0]) if rows else None


def _standing(pg: PgServer, key: str) -> int:
    """How many parked claims stand on the schema of ``key`` now."""
    return int(_sql(pg, key, "SELECT count(*) FROM {s}.standing_claims")[0][0])


@dataclass(frozen=True)
class SettledRail:
    """One rail's schema seen by two instances (:func:`idle_pair`): ``idle``, settled (its
    listener up, its ``waiters`` row live: its parked claims stand), and ``writer`` for
    another host; ``pid`` a pipeline with a ``coder`` stage."""

    pg: PgServer
    schema: str
    idle: PostgresTracker
    writer: PostgresTracker
    pid: str

    def leased_to(self, task_id: str) -> str | None:
        """:func:`_leased_to` on this rail."""
        return _leased_to(self.pg, self.schema, task_id)

    def standing(self) -> int:
        """:func:`_standing` on this rail."""
        return _standing(self.pg, self.schema)


@pytest.fixture
async def rail(pg_server: PgServer) -> AsyncIterator[SettledRail]:
    """A fresh :class:`SettledRail` (its schema new), both instances closed after the test."""
    schema = f"stand-{uuid.uuid4()}"
    async with idle_pair(schema) as (idle, writer):
        pid = await make_pipeline(writer)
        await settle(idle)
        yield SettledRail(pg_server, schema, idle, writer, pid)


@dataclass
class Park:
    """A parked claim of :func:`_standing_park`: its key, and what it answered (filled once
    its block has ended)."""

    key: str = field(default_factory=lambda: str(uuid.uuid4()))
    got: list[Lease] = field(default_factory=list)


@asynccontextmanager
async def _standing_park(idle: PostgresTracker, role: str = "coder") -> AsyncIterator[Park]:
    """One parked claim of ``idle`` under a new key, in the background, the whole block within
    10 s; the block starts once it stands (a real condition: ``stood`` counted up)."""
    park = Park()
    stood = idle._standing.stood
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def parked() -> None:
                park.got.extend(
                    await idle.parked_claim(
                        "idle", role, 60_000, 1, PARK_MS, idempotency_key=park.key
                    )
                )

            tg.start_soon(parked)
            await wait_until(lambda: idle._standing.stood > stood)
            yield park


async def test_a_create_claims_for_a_standing_parked_claim(rail: SettledRail) -> None:
    async with _standing_park(rail.idle) as park:
        assert rail.standing() == 1
        task_id = await rail.writer.create_task(new_task(rail.pid, "now"))
        assert rail.leased_to(task_id) == "idle"
        assert rail.standing() == 0
    # The create's own write claimed it: the claim was recorded at the create's time
    # (the idle instance's own claim would have come after the create's NOTIFY).
    [(recorded_at, created_at)] = _sql(
        rail.pg,
        rail.schema,
        "SELECT i.created_at_ms, t.created_at_ms FROM {s}.idempotency i, {s}.tasks t "
        "WHERE i.key = %s AND i.operation = 'claim_many' AND t.id = %s",
        attempt_key(park.key, 0),
        task_id,
    )
    assert recorded_at == created_at
    [lease] = park.got
    assert lease.task.id == task_id
    assert lease.run.started_at_ms == created_at  # as the rail's run row says
    # a retry under the key answers the same lease, the same token
    [again] = await rail.idle.claim_many(
        "idle", "coder", 60_000, 1, idempotency_key=attempt_key(park.key, 0)
    )
    assert (again.run_id, again.lease_token) == (lease.run_id, lease.lease_token)
    await rail.idle.heartbeat(lease)  # the token is the rail's
    await rail.idle.transition(lease, "complete")
    assert (await rail.writer.get_task(task_id)).stage != "todo"


async def test_a_dead_holders_standing_claim_strands_nothing(pg_server: PgServer) -> None:
    schema = f"stand-{uuid.uuid4()}"
    code = (
        "import anyio, uuid, sys\n"
        "from tracker_client.factory import open_tracker\n"
        "async def main():\n"
        f"    t = await open_tracker({fresh_schema_url(schema)!r})\n"
        "    await t.parked_claim('idle', 'coder', 60000, 1, 50,"
        " idempotency_key=str(uuid.uuid4()))\n"
        "    async with anyio.create_task_group() as tg:\n"
        "        tg.start_soon(lambda: t.parked_claim('idle', 'coder', 600000, 1, 60000,"
        " idempotency_key=str(uuid.uuid4())))\n"
        "        while not t._standing.stood:\n"
        "            await anyio.sleep(0.01)\n"
        "        print('standing', flush=True)\n"
        "anyio.run(main)\n"
    )
    writer = await open_tracker(fresh_schema_url(schema))
    try:
        pid = await make_pipeline(writer)
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ}
        )
        try:
            assert proc.stdout is not None
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
            assert line.strip() == b"standing"
            assert _standing(pg_server, schema) == 1
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
        # its listener's session, and the lock that says it is alive, end with the process
        rail = holder_of(channel_name(schema_name(schema)), "")[0] % 2**32
        await wait_until(
            lambda: (
                not _sql(
                    pg_server,
                    schema,
                    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                    "AND classid::bigint = %s",
                    rail,
                )
            )
        )
        task_id = await writer.create_task(new_task(pid, "after the kill"))
        assert _leased_to(pg_server, schema, task_id) is None  # not leased to the dead one
        assert _standing(pg_server, schema) == 0  # its row went with the create's look
        lease = await writer.claim("other", "coder", 60_000)
        assert lease is not None and lease.task.id == task_id  # claimable at once
    finally:
        await writer.aclose()


def _create_holding_the_loop(url: str, pid: str) -> str:
    """A task created by an instance of its own on a thread of its own, this thread (and its
    event loop) blocked until it has committed."""
    created: list[str] = []

    async def create() -> None:
        writer = await open_tracker(url)
        try:
            created.append(await writer.create_task(new_task(pid, "then cancelled")))
        finally:
            await writer.aclose()

    thread = threading.Thread(target=anyio.run, args=(create,))
    thread.start()
    thread.join(30)
    [task_id] = created
    return task_id


async def test_a_cancelled_standing_claim_gives_back_what_a_create_leased(
    rail: SettledRail,
) -> None:
    async with _standing_park(rail.idle) as park:
        # the create from another thread, this loop held meanwhile: the cancel comes before
        # the idle instance has read the create's NOTIFY
        task_id = _create_holding_the_loop(fresh_schema_url(rail.schema), rail.pid)
        assert rail.leased_to(task_id) == "idle"
        cancelled = await rail.idle.cancel_parked_claim(idempotency_key=park.key)
    assert park.got == []
    assert cancelled.released == 1
    assert rail.leased_to(task_id) is None
    lease = await rail.writer.claim("other", "coder", 60_000)
    assert lease is not None and lease.task.id == task_id
    # the run the create started for it ended released (given back, not failed)
    assert _sql(
        rail.pg,
        rail.schema,
        "SELECT status FROM {s}.runs WHERE task_id = %s AND id <> %s",
        task_id,
        lease.run_id,
    ) == [("released",)]


async def test_a_cancelled_standing_claim_leaves_nothing_to_claim_for(rail: SettledRail) -> None:
    async with _standing_park(rail.idle) as park:
        cancelled = await rail.idle.cancel_parked_claim(idempotency_key=park.key)
    assert (park.got, cancelled.released) == ([], 0)
    assert rail.standing() == 0
    task_id = await rail.writer.create_task(new_task(rail.pid, "after the cancel"))
    assert rail.leased_to(task_id) is None


async def test_a_parked_claim_whose_wait_ends_takes_what_a_create_leased(
    rail: SettledRail, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wait ends (its deadline) after a create claimed for it and no NOTIFY came (the fault
    # injected: the writer's NOTIFY lost): the withdrawal finds the row gone and the parked
    # claim answers the lease. The withdrawal waits for the create (on a loaded machine the
    # create may come after the 400 ms: the order under test would be left to timing).
    idle, writer = rail.idle, rail.writer
    monkeypatch.setattr(writer._engine, "_notify_sql", "SELECT 1;")
    stood = idle._standing.stood
    task_id = ""
    created = anyio.Event()
    withdraw = idle._idle_look._withdraw

    async def withdraw_after_the_create(stand: Any) -> bool:
        await created.wait()
        return await withdraw(stand)

    monkeypatch.setattr(idle._idle_look, "_withdraw", withdraw_after_the_create)

    async def create_when_standing() -> None:
        nonlocal task_id
        await wait_until(lambda: idle._standing.stood > stood)
        task_id = await writer.create_task(new_task(rail.pid, "at the deadline"))
        created.set()

    got: list[Lease] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(create_when_standing)
            got = await idle.parked_claim(
                "idle", "coder", 60_000, 1, 400, idempotency_key=str(uuid.uuid4())
            )
    assert [lease.task.id for lease in got] == [task_id]


async def test_two_creates_never_grant_one_standing_claim_twice(rail: SettledRail) -> None:
    other = await open_tracker(fresh_schema_url(rail.schema))
    try:
        ids: list[str] = []
        async with _standing_park(rail.idle) as park, anyio.create_task_group() as tg:
            for creator in (rail.writer, other):

                async def create(c: PostgresTracker = creator) -> None:  # type: ignore[assignment]
                    ids.append(await c.create_task(new_task(rail.pid, "race")))

                tg.start_soon(create)
        leased = [i for i in ids if rail.leased_to(i) == "idle"]
        assert len(ids) == 2 and len(leased) == 1
        assert [lease.task.id for lease in park.got] == leased
    finally:
        await other.aclose()


async def test_a_standing_claim_of_another_role_is_left_standing(rail: SettledRail) -> None:
    async with _standing_park(rail.idle, role="reviewer") as park:
        task_id = await rail.writer.create_task(new_task(rail.pid, "for a coder"))
        assert rail.leased_to(task_id) is None
    assert park.got == []  # its NOTIFY sent the claim on: no reviewer's work
