"""The ``follow`` extension across hosts on a real PostgreSQL: a follower on one instance is woken
by another instance's event through the follow channel's NOTIFY (not by its safety tick), and a
rail nobody follows sends no follow NOTIFY at all (its commit-time queue lock would serialise
the writers). The contract of ``follow_task`` itself runs in tests/contract/test_follow.py."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from tests.contract.support import claim, make_pipeline, new_task
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tracker_client.factory import open_tracker
from tracker_client.postgres import follow
from tracker_client.postgres.tracker import PostgresTracker
from tracker_client.postgres.wake import channel_name

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _key() -> str:
    return f"follow-{uuid.uuid4()}"


async def test_a_follower_is_woken_by_another_hosts_event_by_notify(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follow, "FOLLOW_TICK_S", 60.0)  # only a NOTIFY can wake it in time
    url = fresh_schema_url(_key())
    follower, writer = await open_tracker(url), await open_tracker(url)
    try:
        pid = await make_pipeline(writer)
        tid = await writer.create_task(new_task(pid))
        lease = await claim(writer)
        first = await follower.call("follow_task", tid, timeout_ms=0)
        got: list[Any] = []

        async def follow_it() -> None:
            got.append(
                await follower.call("follow_task", tid, after=first.next_cursor, timeout_ms=50_000)
            )

        with anyio.fail_after(20):  # far below the tick and the follow's own timeout
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow_it)
                assert isinstance(follower, PostgresTracker)
                while not follower.engine.changes.followers:  # the follow is waiting
                    await anyio.sleep(0.01)
                await writer.add_event(lease, "progress", {"host": "b"})
        assert [e.data for e in got[0].events] == [{"host": "b"}]
    finally:
        await follower.aclose()
        await writer.aclose()


async def test_no_follow_notify_while_nobody_follows_then_one_per_write(
    pg_server: PgServer,
) -> None:
    import psycopg

    key = _key()
    schema = schema_name(key)
    work, follows = channel_name(schema), follow.follow_channel(schema)
    url = fresh_schema_url(key)
    writer = await open_tracker(url)
    listen = await anyio.to_thread.run_sync(lambda: psycopg.connect(pg_server.url, autocommit=True))
    try:
        listen.execute(f'LISTEN "{work}"'.encode())
        listen.execute(f'LISTEN "{follows}"'.encode())
        pid = await make_pipeline(writer)
        tid = await writer.create_task(new_task(pid))
        lease = await claim(writer)

        def channels_until_work() -> list[str]:
            # Notifications arrive in commit order: the work channel's ends the round.
            seen: list[str] = []
            for note in listen.notifies(timeout=30):
                seen.append("follow" if note.channel == follows else "work")
                if note.channel == work:
                    return seen
            return seen

        await anyio.to_thread.run_sync(channels_until_work)  # the setup's own notes
        await writer.add_event(lease, "progress", {"n": 1})  # quiet for workers, unfollowed
        await writer.create_task(new_task(pid, "wakes workers"))
        assert await anyio.to_thread.run_sync(channels_until_work) == ["work"]

        follower = await open_tracker(url)
        await follower.call("follow_task", tid, timeout_ms=0)  # makes its followers row
        try:
            await writer.add_event(lease, "progress", {"n": 2})
            await writer.create_task(new_task(pid, "wakes workers again"))
            seen = await anyio.to_thread.run_sync(channels_until_work)
            # The event's own follow note, then the task's work note (its follow note follows).
            assert seen == ["follow", "work"]
        finally:
            await follower.aclose()
    finally:
        listen.close()
        await writer.aclose()
