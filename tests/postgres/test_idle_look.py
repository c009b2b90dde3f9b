"""An idle parked claim on PostgreSQL (tracker_client/postgres/idle.py, ``IdleLook``): it writes
nothing while nothing can be claimed, and every path that makes work claimable still reaches
it: another instance's create, a delay or a retry delay coming due, a lease lapsing, an
upstream task finishing, a cancel; and a listener that is lost sends it back to claiming."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
import pytest

from tests.contract.support import claim, make_pipeline, new_task, simple_pipeline
from tests.postgres.idle_pair import idle_pair, settle
from tests.postgres.server import PgServer, schema_name
from tracker_client.models import Lease, RetryPolicy
from tracker_client.postgres import idle as idle_module
from tracker_client.postgres.tracker import PostgresTracker
from tracker_client.postgres.wake import channel_name

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: Generous for a loaded CI machine; every parked claim below may wait 20 s.
WITHIN_S = 3.0
PARK_MS = 20_000


def _claims_recorded(pg: PgServer, key: str) -> int:
    with psycopg.connect(pg.url, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT count(*) FROM "{schema_name(key)}".idempotency '
            "WHERE operation = 'claim_many'"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _park(idle: PostgresTracker, role: str = "coder") -> list[Lease]:
    return await idle.parked_claim(
        "idle", role, 60_000, 1, PARK_MS, idempotency_key=str(uuid.uuid4())
    )


async def _park_keyed(idle: PostgresTracker, key: str, got: list[Any]) -> None:
    """A parked claim of ``key`` (20 s), its answer appended to ``got``."""
    got.append(await idle.parked_claim("idle", "coder", 60_000, 1, PARK_MS, idempotency_key=key))


async def _leased_within(idle: PostgresTracker, bound_s: float, role: str = "coder") -> Lease:
    """Parked claims one after the other (as the worker's idle rounds send them) until one
    answers a lease, within ``bound_s``."""
    with anyio.fail_after(bound_s):
        while not (leases := await _park(idle, role)):
            pass
    return leases[0]


async def _asleep(idle: PostgresTracker) -> None:
    """Until a parked claim of ``idle`` is asleep, waiting for a wake-up (polled: a real
    condition, not a guess at how long parking takes)."""
    with anyio.fail_after(WITHIN_S):
        while not idle._idle_look.asleep:
            await anyio.sleep(0.005)


@asynccontextmanager
async def _parked_in_background(
    idle: PostgresTracker, bound_s: float
) -> AsyncIterator[list[Lease]]:
    """The idle worker's parked claims sent in the background until one answers a lease
    (:func:`_leased_within` ``bound_s``); the block starts once they are parked and asleep, and
    the list yielded holds the lease when the block has ended."""
    got: list[Lease] = []
    async with anyio.create_task_group() as tg:

        async def park() -> None:
            got.append(await _leased_within(idle, bound_s))

        tg.start_soon(park)
        await _asleep(idle)
        yield got


async def test_an_idle_parked_claim_writes_nothing_while_nothing_comes(pg_server: PgServer) -> None:
    key = f"look-{uuid.uuid4()}"
    async with idle_pair(key) as (idle, writer):
        await make_pipeline(writer)
        await settle(idle)
        before = _claims_recorded(pg_server, key)
        for _ in range(3):
            got = await idle.parked_claim(
                "idle", "coder", 60_000, 1, 300, idempotency_key=str(uuid.uuid4())
            )
            assert got == []
        # Before: each of these claimed at its start and at its deadline (keyed writes).
        assert _claims_recorded(pg_server, key) == before


async def test_idle_parked_claims_one_after_another_read_the_rail_once(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An idle worker's parked claims follow each other (its idle rounds): while nothing came
    # since the last look (no wake-up, no due time, within the look's tick) it still answers.
    # The tick at 60 s: a machine stalled past the 2 s tick would make the counts below lie.
    monkeypatch.setattr(idle_module, "LOOK_TICK_S", 60.0)
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        await settle(idle)
        looks = idle._idle_look.looks
        for _ in range(3):
            assert (
                await idle.parked_claim(
                    "idle", "coder", 60_000, 1, 100, idempotency_key=str(uuid.uuid4())
                )
                == []
            )
        assert idle._idle_look.looks == looks + 1
        assert idle._idle_look.looks_saved == 2
        # Another role's parked claim looks for itself; and work that comes is leased.
        assert await _park_for(idle, "reviewer", 100) == []
        assert idle._idle_look.looks == looks + 2
        task_id = await writer.create_task(new_task(pid, "new work"))
        lease = await _leased_within(idle, WITHIN_S)
        assert lease.task.id == task_id


async def test_a_look_past_its_due_time_is_not_reused(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The look saw a delayed task due in 1 s: a parked claim after that reads the rail again.
    # With the look's tick at 60 s, only its due time ends its reuse within the bound.
    monkeypatch.setattr(idle_module, "LOOK_TICK_S", 60.0)
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        await settle(idle)
        task_id = await writer.create_task(new_task(pid, "later", delay_ms=1000))
        assert await _park_for(idle, "coder", 100) == []  # looked: due in ~0.9 s
        looks = idle._idle_look.looks
        with anyio.fail_after(WITHIN_S):
            while not (got := await _park_for(idle, "coder", 100)):
                pass
        assert got[0].task.id == task_id
        assert idle._idle_look.looks > looks  # the look came due: read again, not reused


async def _park_for(idle: PostgresTracker, role: str, wait_ms: int) -> list[Lease]:
    return await idle.parked_claim(
        "idle", role, 60_000, 1, wait_ms, idempotency_key=str(uuid.uuid4())
    )


async def test_another_instances_create_is_leased_at_once(pg_server: PgServer) -> None:
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        await settle(idle)
        async with _parked_in_background(idle, WITHIN_S + 1) as got:
            start = anyio.current_time()
            task_id = await writer.create_task(new_task(pid, "new work"))
        assert anyio.current_time() - start < WITHIN_S
        assert got[0].task.id == task_id


async def test_a_delayed_task_is_leased_when_it_comes_due(pg_server: PgServer) -> None:
    # Before, the parked claim slept until its deadline (20 s): a delay has no NOTIFY.
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        await settle(idle)
        task_id = await writer.create_task(new_task(pid, "later", delay_ms=1000))
        start = time.monotonic()
        lease = await _leased_within(idle, WITHIN_S + 1)
        assert lease.task.id == task_id
        assert time.monotonic() - start >= 0.5  # not before it was due


async def test_a_retry_delay_coming_due_is_leased(pg_server: PgServer) -> None:
    # The fail's NOTIFY comes before the task is due; the due time wakes the parked claim.
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        await settle(idle)
        task_id = await writer.create_task(
            new_task(pid, "flaky", retry_policy=RetryPolicy(retry_delay_ms=1000))
        )
        lease = await claim(writer, agent="other")
        await writer.fail(lease, "boom")
        again = await _leased_within(idle, WITHIN_S + 1)
        assert again.task.id == task_id


async def test_a_lapsed_lease_is_leased_again(pg_server: PgServer) -> None:
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        task_id = await writer.create_task(new_task(pid, "orphan"))
        await claim(writer, agent="dies", ttl_ms=800)  # never heartbeated: it lapses
        await settle(idle)
        lease = await _leased_within(idle, WITHIN_S + 1)
        assert lease.task.id == task_id


async def test_an_upstream_task_finishing_releases_its_dependent(pg_server: PgServer) -> None:
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        upstream = await writer.create_task(new_task(pid, "first"))
        lease = await claim(writer, agent="other")
        assert lease.task.id == upstream
        dependent = await writer.create_task(new_task(pid, "second", dependencies=[upstream]))
        await settle(idle)
        async with _parked_in_background(idle, WITHIN_S + 1) as got:
            assert not got  # parked: nothing claimable (its upstream runs)
            await writer.transition(lease, "complete")
        assert got[0].task.id == dependent


async def test_a_cancelled_parked_claim_answers_empty_and_leases_nothing(
    pg_server: PgServer,
) -> None:
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        await settle(idle)
        key = str(uuid.uuid4())
        got: list[Any] = []
        with anyio.fail_after(WITHIN_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_park_keyed, idle, key, got)
                await _asleep(idle)
                cancelled = await idle.cancel_parked_claim(idempotency_key=key)
        assert got == [[]] and cancelled.released == 0
        task_id = await writer.create_task(new_task(pid, "for someone else"))
        assert (await claim(writer)).task.id == task_id  # nobody leased it meanwhile


async def test_a_cancel_while_the_listener_starts_ends_the_claim_at_once(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cancel comes while the claim waits for its listener, which then answers "not up":
    # the claim answers empty at once, instead of parking on the rail for its whole wait while
    # the cancel (and the stopping worker) waits for it. The order is forced: the listener's
    # answer is held until the cancel has taken the claim out.
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        await make_pipeline(writer)
        await settle(idle)
        look = idle._idle_look
        entered, gate = anyio.Event(), anyio.Event()

        async def listening(wait_s: float) -> bool:
            entered.set()
            await gate.wait()
            return False  # the listener is not up: the claim would go to the rail's park

        monkeypatch.setattr(look._engine, "listening", listening)
        key = str(uuid.uuid4())
        got: list[Any] = []
        with anyio.fail_after(WITHIN_S):  # not the park's 20 s
            async with anyio.create_task_group() as tg:
                tg.start_soon(_park_keyed, idle, key, got)
                await entered.wait()

                async def cancel() -> None:
                    await idle.cancel_parked_claim(idempotency_key=key)

                tg.start_soon(cancel)
                while key in look._waiting:  # the cancel has taken it out
                    await anyio.sleep(0.005)
                gate.set()
        assert got == [[]]


async def test_a_lost_listener_sends_the_parked_claim_back_to_claiming(pg_server: PgServer) -> None:
    # The listener's backend ends while a create's NOTIFY is in flight: the waiter is woken by
    # the loss itself, and the work is leased whatever the reconnect does.
    key = f"look-{uuid.uuid4()}"
    listen = f'LISTEN "{channel_name(schema_name(key))}"'
    async with idle_pair(key) as (idle, writer):
        pid = await make_pipeline(writer)
        await settle(idle)
        async with _parked_in_background(idle, WITHIN_S + 2) as got:
            with psycopg.connect(pg_server.url, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                    (listen,),
                )
            task_id = await writer.create_task(new_task(pid, "while the listener was down"))
        assert got[0].task.id == task_id


async def test_a_write_of_its_own_instance_is_looked_at_not_claimed(pg_server: PgServer) -> None:
    # Its own worker's reports wake it in process: a look (a read) says whether they made work
    # for its role; a task of another role is no reason to claim, one of its role is leased.
    key = f"look-{uuid.uuid4()}"
    async with idle_pair(key) as (idle, writer):
        mine = await make_pipeline(writer)
        other = await make_pipeline(writer, simple_pipeline(role="reviewer"))
        await settle(idle)
        before = _claims_recorded(pg_server, key)
        async with anyio.create_task_group() as tg:
            got: list[list[Lease]] = []

            async def park() -> None:
                got.append(
                    await idle.parked_claim(
                        "idle", "coder", 60_000, 1, 1500, idempotency_key=str(uuid.uuid4())
                    )
                )

            tg.start_soon(park)
            await _asleep(idle)
            await idle.create_task(new_task(other, "not for a coder"))
        assert got == [[]]
        assert _claims_recorded(pg_server, key) == before
        async with anyio.create_task_group() as tg:

            async def park_again() -> None:
                got.append([await _leased_within(idle, WITHIN_S)])

            tg.start_soon(park_again)
            await _asleep(idle)
            task_id = await idle.create_task(new_task(mine, "for a coder"))
        assert got[1][0].task.id == task_id


async def test_a_cancel_that_overtakes_an_idle_parked_claim_answers_it_at_once(
    pg_server: PgServer,
) -> None:
    # Nothing waiting: the claim would wait without writing; its cancel came first (two
    # connections, a stopping worker), so it answers at once instead of its 20 s.
    async with idle_pair(f"look-{uuid.uuid4()}") as (idle, writer):
        await make_pipeline(writer)
        await settle(idle)
        key = str(uuid.uuid4())
        assert (await idle.cancel_parked_claim(idempotency_key=key)).released == 0
        with anyio.fail_after(WITHIN_S):
            got = await idle.parked_claim("idle", "coder", 60_000, 1, PARK_MS, idempotency_key=key)
        assert got == []
