"""Persistent connections: used only with a server that advertises ``keep_alive``.

A plain NullTickets server (the in-memory fake) sees ``Connection: close`` on every request, as
before; the served tracker (uvicorn on 127.0.0.1, behind the fault proxy with chosen fates) gets
many requests per connection; a kept-alive connection reset mid-write is retried (by the
caller's retry settings) with the same ``Idempotency-Key``: the write is applied once, and a
write is never sent again by the transport on its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest

from tests.faultproxy import FaultProxy
from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import TrackerUnavailable
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SERVED_PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


class ScriptedProxy(FaultProxy):
    """A fault proxy whose fates come from a script (then ``pass``), one per request."""

    def __init__(self, upstream_port: int, fates: list[str]) -> None:
        super().__init__(upstream_port, reset_rate=0, drop_rate=0, delay_rate=0)
        self._script: Iterator[str] = iter(fates)

    def _fate(self) -> str:
        return next(self._script, "pass")


@asynccontextmanager
async def _served(
    tmp_path: Path, fates: list[str]
) -> AsyncIterator[tuple[EmbeddedTracker, ScriptedProxy, str]]:
    embedded = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        async with serve_on_port(create_app(embedded)) as url:
            proxy = ScriptedProxy(int(url.rsplit(":", 1)[1]), fates)
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            async with anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, proxy.handle)
                yield embedded, proxy, f"http://127.0.0.1:{port}"
                tg.cancel_scope.cancel()
            await listener.aclose()
    finally:
        await embedded.aclose()


async def test_a_plain_server_gets_one_connection_per_request() -> None:
    fake = FakeNullTickets()
    tracker = RemoteTracker("http://127.0.0.1:7700", transport=fake.transport())
    try:
        pid = await tracker.create_pipeline("p", PIPELINE)
        await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        lease = await tracker.claim("a", "coder", 60_000)
        assert lease is not None
        await tracker.add_event(lease, "step", {})
    finally:
        await tracker.aclose()
    assert len(fake.requests) >= 5
    assert [r.headers.get("connection") for r in fake.requests] == ["close"] * len(fake.requests)


async def test_the_served_tracker_gets_many_requests_per_connection(tmp_path: Path) -> None:
    async with _served(tmp_path, []) as (_, proxy, url):
        tracker = RemoteTracker(url)
        try:
            pid = await tracker.create_pipeline("p", SERVED_PIPELINE)
            await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in "ab"])
            for _ in range(2):
                lease = await tracker.claim("a", "coder", 60_000)
                assert lease is not None
                await tracker.add_event(lease, "step", {})
                await tracker.transition(lease, "complete")
        finally:
            await tracker.aclose()
    # /health on a closing connection, then every request on one kept-alive connection.
    assert proxy.stats["pass"] == 9
    assert proxy.stats["kept_alive"] == 8


@pytest.mark.parametrize("fate", ["reset", "drop"])
async def test_a_keepalive_connection_lost_mid_write_is_resent_and_applied_once(
    tmp_path: Path, fate: str
) -> None:
    # health, pipeline, task, claim pass; the transition's connection dies (before it reached
    # the server, or after the server committed it): the retry sends it again, same key.
    async with _served(tmp_path, ["pass"] * 4 + [fate]) as (embedded, proxy, url):
        tracker = RemoteTracker(url, retry_attempts=3, retry_initial_s=0.01)
        try:
            pid = await tracker.create_pipeline("p", SERVED_PIPELINE)
            tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
            lease = await tracker.claim("a", "coder", 60_000)
            assert lease is not None
            result = await tracker.transition(lease, "complete", idempotency_key="k-1")
            assert result.new_stage == "done"
        finally:
            await tracker.aclose()
        assert proxy.stats[fate] == 1
        detail = await embedded.get_task(tid)
        assert detail.stage == "done" and detail.task_version == 2
        runs = await embedded.list_runs(tid)
        assert [r.status for r in runs] == ["completed"]
        events = await embedded.list_task_events(tid, kind="transition")
        assert len(events.items) == 1


async def test_a_write_is_not_resent_by_the_transport_on_a_lost_connection(
    tmp_path: Path,
) -> None:
    # health, pipeline, task pass; the cancel loses its kept-alive connection after the server
    # committed: with no retry asked it is not sent again (whether it was applied is unknown);
    # the caller hears the connection was lost.
    async with _served(tmp_path, ["pass"] * 3 + ["drop"]) as (embedded, proxy, url):
        tracker = RemoteTracker(url)
        try:
            pid = await tracker.create_pipeline("p", SERVED_PIPELINE)
            tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
            with pytest.raises(TrackerUnavailable):
                await tracker.call("cancel", tid)
        finally:
            await tracker.aclose()
        assert proxy.stats["drop"] == 1 and proxy.stats["pass"] == 3
        assert (await embedded.get_task(tid)).dead_letter_reason == "cancelled"


async def test_a_read_on_a_lost_keepalive_connection_is_sent_again(tmp_path: Path) -> None:
    async with _served(tmp_path, ["pass", "pass", "reset"]) as (_, proxy, url):
        tracker = RemoteTracker(url)
        try:
            pid = await tracker.create_pipeline("p", SERVED_PIPELINE)
            assert [p.id for p in await tracker.list_pipelines()] == [pid]
        finally:
            await tracker.aclose()
        assert proxy.stats["reset"] == 1 and proxy.stats["pass"] == 3
