"""LISTEN/NOTIFY wake-ups between two instances of one rail (as two hosts): new work, a cancel
and a finished task wake the other instance's waiters well before the 5 s safety tick."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from tests.contract.support import claim, make_pipeline, new_task
from tests.postgres.idle_pair import idle_pair, waiters_asleep
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tests.worker.test_watch_since import submit_during_the_pause_wakes
from tracker_client.factory import open_tracker
from tracker_client.postgres import engine as pg_engine
from tracker_client.postgres.tracker import SAFETY_TICK_S

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: Generous for a loaded CI machine, and still well under the safety tick.
WOKEN_WITHIN_S = 2.5


async def test_another_instance_wakes_idle_waiters_at_once(pg_server: PgServer) -> None:
    assert WOKEN_WITHIN_S < SAFETY_TICK_S
    async with idle_pair(f"wake-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        await idle.wait_for_work(0.01)  # the listener is up from here on
        latencies: list[float] = []

        async def woken(action: Callable[[], Awaitable[object]]) -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(idle.wait_for_work, 30.0)
                await waiters_asleep(idle)
                start = anyio.current_time()
                await action()
            latencies.append(anyio.current_time() - start)

        await woken(lambda: writer.create_task(new_task(pid, "new work")))
        lease = await claim(idle)
        mark = await idle.wait_for_work(0)
        second = await writer.create_task(new_task(pid, "to cancel"))
        with anyio.fail_after(WOKEN_WITHIN_S):  # its NOTIFY came: no late wake-up below
            await idle.wait_for_work(30.0, since=mark)
        await woken(lambda: writer.cancel(second))
        assert all(s < WOKEN_WITHIN_S for s in latencies), latencies

        with anyio.fail_after(WOKEN_WITHIN_S + 1):
            async with anyio.create_task_group() as tg:

                async def finish() -> None:
                    await waiters_asleep(idle)  # the wait looked: the task was not finished
                    await writer.transition(lease, "complete")

                tg.start_soon(finish)
                result = await idle.wait(lease.task.id, timeout_s=30)
        assert result.finished and result.outcome == "done"


def _notes_until_marker(conn: Any, channel: str) -> list[str]:
    """The payloads ``conn`` (LISTENing on ``channel``) received before a marker this sends:
    notifications arrive in commit order, so what comes before it is all that was sent."""
    import psycopg

    marker = uuid.uuid4().hex
    with psycopg.connect(conn.info.dsn, autocommit=True) as sender:
        sender.execute("SELECT pg_notify(%s, %s)", (channel, marker))
    got: list[str] = []
    for note in conn.notifies(timeout=30):
        if note.payload == marker:
            return got
        got.append(note.payload)
    raise AssertionError(f"the marker never came (got {got})")


@pytest.mark.usefixtures("quiet_tracker_log")  # the moves' one-trip path is what is counted
async def test_moves_notify_only_while_an_instance_is_idle(pg_server: PgServer) -> None:
    """A plain transition or finish_many of a busy rail sends no NOTIFY (nobody waits for what
    it brings); once a claim of another instance came back short, they do (a writer's own
    waiters are woken in process). Other writes always notify."""
    import psycopg

    from tracker_client.contract.batch_models import FinishItem
    from tracker_client.postgres.wake import channel_name

    key = f"idle-{uuid.uuid4()}"
    tracker: Any = await open_tracker(fresh_schema_url(key))
    with psycopg.connect(pg_server.url, autocommit=True) as listen:
        try:
            channel = channel_name(schema_name(key))
            listen.execute(f'LISTEN "{channel}"')
            pid = await make_pipeline(tracker)
            await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(4)])
            assert _notes_until_marker(listen, channel)  # the creates notified
            busy = await tracker.call(
                "claim_many", agent_id="a", agent_role="coder", lease_ttl_ms=60_000, n=2
            )
            assert len(busy) == 2  # a full claim: not idle
            await tracker.transition(busy[0], "complete")
            await tracker.finish_many(
                [FinishItem(lease=busy[1], transition={"trigger": "complete"})]
            )
            assert _notes_until_marker(listen, channel) == []
            await tracker.create_task(new_task(pid, "more"))
            assert len(_notes_until_marker(listen, channel)) == 1  # not a move: notifies

            rest = await tracker.call(
                "claim_many", agent_id="a", agent_role="coder", lease_ttl_ms=60_000, n=5
            )
            assert len(rest) == 3  # short: this instance is idle now
            await tracker.transition(rest[0], "complete")
            # its own row only: it ignores its own NOTIFYs, so none is sent (schema 20)
            assert _notes_until_marker(listen, channel) == []
            other: Any = await open_tracker(fresh_schema_url(key))
            try:  # another instance idle: the moves notify
                idle = await other.call(
                    "claim_many", agent_id="b", agent_role="coder", lease_ttl_ms=60_000, n=1
                )
                assert idle == []
                await tracker.transition(rest[1], "complete")
                await tracker.finish_many(
                    [FinishItem(lease=rest[2], transition={"trigger": "complete"})]
                )
                assert len(_notes_until_marker(listen, channel)) == 2
            finally:
                await other.aclose()
        finally:
            await tracker.aclose()


async def test_a_one_trip_move_wakes_a_waiter_of_another_instance(pg_server: PgServer) -> None:
    import psycopg

    key = f"waitmove-{uuid.uuid4()}"
    async with idle_pair(key) as (waiter, mover):
        pid = await make_pipeline(mover)
        await mover.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
        lease = await claim(mover)  # a full claim of one: the mover is busy, not idle
        result: list[Any] = []

        async def wait() -> None:
            result.append(await waiter.wait(lease.task.id, timeout_s=30))

        with anyio.fail_after(WOKEN_WITHIN_S + 10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                with psycopg.connect(pg_server.url, autocommit=True) as conn:
                    while not conn.execute(
                        f"SELECT count(*) FROM {schema_name(key)}.waiters"
                    ).fetchone()[0]:  # type: ignore[index]
                        await anyio.sleep(0.01)  # polling a real condition: the waiter's row
                await waiters_asleep(waiter)  # and its look found the task running
                start = anyio.current_time()
                await mover.transition(lease, "complete")  # the one-trip move
        assert anyio.current_time() - start < WOKEN_WITHIN_S
        assert result and result[0].finished and result[0].outcome == "done"


async def test_a_submit_during_the_watch_pause_wakes_the_idle_wait(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """worker/daemon/watch.py passes each wait's change mark to the next: a NOTIFY that came
    while it paused is not lost (the safety tick, widened to 30 s, cannot wake it instead)."""
    monkeypatch.setattr(pg_engine, "SAFETY_TICK_S", 30.0)
    async with idle_pair(f"pause-{uuid.uuid4()}") as (watched, writer):
        await submit_during_the_pause_wakes(watched, writer, monkeypatch)


async def test_the_listener_listens_again_after_its_connection_is_killed(
    pg_server: PgServer,
) -> None:
    # The event loop reads the listening socket (tracker_client/postgres/wake.py); the server
    # ending that backend is seen there, and the listener's thread connects and LISTENs again.
    # Polling every 10 s, only a listener that is back wakes the waiter within the bound.
    import psycopg

    from tracker_client.postgres.wake import channel_name

    key = f"wake-{uuid.uuid4()}"
    listen = f'LISTEN "{channel_name(schema_name(key))}"'

    def listening() -> set[int]:
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE query = %s", (listen,))
            return {int(row[0]) for row in rows}

    async with idle_pair(key, poll_interval_s=10) as (idle, writer):
        pid = await make_pipeline(writer)
        await idle.wait_for_work(0.01)  # the listener is up from here on
        before = listening()
        assert len(before) == 1
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (next(iter(before)),))
        listener = idle._engine._listener
        assert listener is not None
        with anyio.fail_after(15):
            while not listening() - before:  # a new backend LISTENs: the listener is back
                await anyio.sleep(0.05)
            while not listener.healthy:  # and the loop reads it (its wake-up on coming back
                await anyio.sleep(0.005)  # is done: it cannot end the waiter below early)
        async with anyio.create_task_group() as tg:
            tg.start_soon(idle.wait_for_work, 30.0)
            await waiters_asleep(idle)
            start = anyio.current_time()
            await writer.create_task(new_task(pid, "after the listener came back"))
        assert anyio.current_time() - start < WOKEN_WITHIN_S


async def test_a_wait_right_after_a_wake_up_waits_for_the_claim_and_misses_nothing(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch, rail_logs_warnings_only: None
) -> None:
    # A wait beginning within REARM_AFTER_WAKE_S of another host's wake-up first lets the
    # calls in flight on the event loop's connections end (the claim the wake-up started), so
    # its own read does not run beside that claim; a submit meanwhile still ends it at once.
    monkeypatch.setattr(pg_engine, "REARM_AFTER_WAKE_S", 5.0)  # room for the order to show
    monkeypatch.setattr(pg_engine, "SAFETY_TICK_S", 30.0)
    async with idle_pair(f"rearm-{uuid.uuid4()}") as (idle, writer):
        pid = await make_pipeline(writer)
        await idle.wait_for_work(0.01)  # the listener is up from here on
        async with anyio.create_task_group() as tg:
            tg.start_soon(idle.wait_for_work, 30.0)
            await waiters_asleep(idle)
            await writer.create_task(new_task(pid, "first"))
        mark = str(idle._changes.seq)
        order: list[str] = []
        lane = idle._engine.db.lane
        assert lane is not None
        real_run = lane.run

        async def slow_run(job: Any) -> Any:
            async def slow(conn: Any) -> Any:
                await anyio.sleep(0.3)  # the subject, not a wait: a claim still at the server
                return await job(conn)

            found = await real_run(slow)
            order.append("claim answered")
            return found

        monkeypatch.setattr(lane, "run", slow_run)
        claiming = anyio.Event()

        async def claim_it() -> None:
            claiming.set()
            await claim(idle)  # on the event loop's connection (the lane)

        async def wait_it() -> None:
            await claiming.wait()
            await idle.wait_for_work(30.0, since=mark)
            order.append("wait ended")

        with anyio.fail_after(WOKEN_WITHIN_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_it)
                tg.start_soon(claim_it)
                await claiming.wait()
                await writer.create_task(new_task(pid, "second, during the claim"))
        assert order == ["claim answered", "wait ended"]


async def test_a_stopped_listener_ends_without_waiting_out_its_poll(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # While the event loop reads the socket, the listener's thread waits for the connection to
    # be lost, looking at its stop flag once per poll: a stop must end that wait at once (a
    # stopping worker joined the thread for up to a poll, 0.5 s of every PostgreSQL worker's
    # exit). With the poll at 60 s, only a stop that wakes the thread ends within the bound.
    from tracker_client.postgres import wake

    monkeypatch.setattr(wake, "_POLL_S", 60.0)
    channel = wake.channel_name(schema_name(f"stop-{uuid.uuid4()}"))
    listener = wake.Listener(pg_server.url, channel, "instance", lambda: None)
    with anyio.fail_after(15):
        while not listener.healthy:  # connected and LISTENing, the loop reading its socket
            await anyio.sleep(0.02)
    join = listener.stop()
    await anyio.to_thread.run_sync(join, 15.0)
    assert not listener._thread.is_alive()
