"""The lease by the worker's own clock: an executor never outlives the lease it runs under.

Heartbeats that hang (the tracker accepted the connection and never answers) must not keep an
executor running until the request timeout: it is cancelled when the lease runs out by the
worker's clock (minus a safety margin). The tracker may still hold the lease (the hung heartbeat
may have landed), so the run is handed back rather than abandoned, and nothing else is written.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext
from tests.faultproxy import FaultProxy, Hang
from tests.remote.fixtures import TEST_RETRY, QuietServer, uvicorn_config
from tests.worker.conftest import (
    PIPELINE,
    FnExecutor,
    add_tasks,
    role,
    start_worker,
    wait_until,
    worker_config,
)
from tests.worker.runkit import claim_one, run_task, settings
from tracker_client.embedded import EmbeddedTracker
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.serve.app import create_app
from worker.daemon import Worker
from worker.lease import LocalLease

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: Far longer than the lease: without a local deadline the executor would run this long.
REQUEST_TIMEOUT_S = 30.0


@asynccontextmanager
async def serve_briefly(app: Any) -> AsyncIterator[str]:
    """``app`` on an ephemeral 127.0.0.1 port; yield its URL. Stopping does not wait for
    requests still open upstream (a long-poll the proxy forwarded) beyond half a second."""
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on accepted sockets whose proto says
    # TCP (tests/remote/fixtures.py); with Nagle on, a kept-alive answer waits ~40 ms.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn_config(app, sock)
    config.timeout_graceful_shutdown = 0.5
    server = QuietServer(config)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                await server.ready.wait()
            try:
                yield f"http://127.0.0.1:{sock.getsockname()[1]}"
            finally:
                server.stop()
    finally:
        sock.close()


def _hang(match: str) -> Hang:
    """Every request whose line holds ``match`` is read and never answered (a stuck tracker)."""
    return Hang(match, rate=1.0, hang_s=None)


@asynccontextmanager
async def tracker_behind_proxy(path: Path) -> AsyncIterator[tuple[RemoteTracker, FaultProxy]]:
    """A served embedded tracker on a real port, reached through a :class:`FaultProxy` that
    never answers a heartbeat."""
    embedded = await EmbeddedTracker.open(str(path))
    try:
        async with serve_briefly(create_app(embedded)) as url:
            proxy = FaultProxy(int(url.rsplit(":", 1)[1]), hangs=[_hang("/heartbeat")])
            async with proxy.serve() as proxy_url:
                remote = RemoteTracker(proxy_url, timeout_s=REQUEST_TIMEOUT_S, retry=TEST_RETRY)
                try:
                    await remote.health()
                    yield remote, proxy
                finally:
                    await remote.aclose()
    finally:
        await embedded.aclose()


async def test_hung_heartbeats_cancel_the_executor_when_the_lease_runs_out(
    tmp_path: Path,
) -> None:
    ttl = 1.5
    async with tracker_behind_proxy(tmp_path / "rail.db") as (tracker, proxy):
        pipeline_id = await tracker.create_pipeline("flow", PIPELINE)
        await add_tasks(tracker, pipeline_id, 1)
        started: list[float] = []
        cancelled: list[float] = []
        events_before = 0
        run_id = ""

        async def forever(ctx: ExecutionContext) -> None:
            started.append(time.monotonic())
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.append(time.monotonic())

        worker = Worker(
            tracker,
            worker_config(concurrency=1, lease_ttl_s=ttl, shutdown_grace_s=0.0),
            [role("coder", forever)],
        )
        async with anyio.create_task_group() as tg:
            await start_worker(tg, worker)
            await wait_until(lambda: started)
            task_id = (await tracker.list_tasks(pipeline_id=pipeline_id)).items[0].id
            latest = (await tracker.get_task(task_id)).latest_run
            assert latest is not None
            run_id = latest.id
            events_before = len((await tracker.list_events(run_id)).items)
            await wait_until(lambda: cancelled, timeout=REQUEST_TIMEOUT_S)
            await wait_until(lambda: worker.stats.released >= 1)
            worker.stop(immediate=True)
        print(f"cancelled {cancelled[0] - started[0]:.3f}s after the start (ttl {ttl}s)")
        assert proxy.stats["hung"] >= 1  # the heartbeat really hung
        # Cancelled by the lease's own end (TTL from the claim), not the 30 s request timeout.
        assert cancelled[0] - started[0] < ttl + 0.5
        # Handed back (released: no attempt spent), not abandoned; no error event, no fail.
        assert worker.stats.lost == 0 and worker.stats.failed == 0
        events = (await tracker.list_events(run_id)).items
        assert [(e.kind, e.data["reason"]) for e in events[events_before:]] == [
            ("released", "lease_expired")
        ]
        first = [r for r in await tracker.list_runs(task_id) if r.id == run_id]
        assert first and first[0].status == "released"


async def test_the_local_end_is_the_earlier_of_the_ttl_and_the_trackers_expiry() -> None:
    now = anyio.current_time()
    wall_ms = int(time.time() * 1000)
    # The tracker granted less than asked (e.g. a capped TTL): its expiry wins.
    short = LocalLease(10.0, sent_at=now, tracker_expires_ms=wall_ms + 2_000)
    assert short.expires_at <= anyio.current_time() + 2.0
    assert short.deadline == pytest.approx(short.expires_at - 1.0)  # 10 % of the TTL
    # The tracker's clock ahead of ours: the TTL from when the claim was sent wins.
    long = LocalLease(10.0, sent_at=now, tracker_expires_ms=wall_ms + 3_600_000)
    assert long.expires_at == now + 10.0
    # "Already expired" by our wall clock is taken for skew, not obeyed blindly.
    skewed = LocalLease(10.0, sent_at=now, tracker_expires_ms=wall_ms - 60_000)
    assert skewed.expires_at == now + 10.0
    # A heartbeat that succeeded moves the end from when it was sent, and every watched scope.
    scope = skewed.watch(anyio.CancelScope())
    skewed.extended(now + 5.0, None)
    assert skewed.expires_at == now + 15.0 and scope.deadline == skewed.deadline


async def test_a_far_deadline_is_armed_by_the_first_heartbeat() -> None:
    """A scope watched while the lease's end is more than half the TTL away gets no timer
    until a heartbeat is sent (the keeper sends the first a third of the TTL in); one watched
    closer to the end, or after a heartbeat, gets its deadline at once."""
    now = anyio.current_time()
    lease = LocalLease(30.0, sent_at=now, tracker_expires_ms=None)
    far = lease.watch(anyio.CancelScope())
    far_report = lease.watch_report(anyio.CancelScope())
    assert far.deadline == float("inf") and far_report.deadline == float("inf")
    lease.heartbeat_sent()  # the first heartbeat: every watched scope is armed
    assert far.deadline == lease.deadline and far_report.deadline == lease.report_deadline
    assert lease.watch(anyio.CancelScope()).deadline == lease.deadline  # armed from now on
    # Claimed long ago: the end is near, so the scope is armed at once.
    late = LocalLease(30.0, sent_at=now - 20.0, tracker_expires_ms=None)
    assert late.watch(anyio.CancelScope()).deadline == late.deadline
    # A work scope armed at once stays armed as it goes on as the report's.
    scope = late.watch(anyio.CancelScope())
    late.to_report(scope)
    assert scope.shield and scope.deadline == late.report_deadline


async def test_a_report_hung_with_its_heartbeats_stops_at_the_lease_end(tmp_path: Path) -> None:
    ttl = 1.5
    async with tracker_behind_proxy(tmp_path / "rail.db") as (tracker, proxy):
        proxy.set_hangs([])
        lease = await claim_one(tracker, ttl_s=ttl)
        proxy.set_hangs([_hang("/heartbeat"), _hang("/transition")])
        started = time.monotonic()
        result = await run_task(
            tracker,
            lease,
            FnExecutor(lambda ctx: anyio.sleep(0)),
            settings(tmp_path / "work", ttl_s=ttl, report_retry_budget_s=60.0),
        )
        took = time.monotonic() - started
        assert proxy.stats["hung"] >= 2  # the transition and the report's heartbeat both hung
        # Given up when the tracker can no longer hold the lease by our clock (the hung
        # heartbeat, sent before the claim's TTL ran out, may have landed and granted one more
        # TTL), not after the 30 s request timeout.
        assert result.status == "lost" and took < 2 * ttl + 0.5, (result, took)


async def test_a_lease_reads_the_clock_it_was_handed() -> None:
    """A run's lease reads the clock the claim loop hands it (the running loop's, looked up
    once per worker instead of a few times per run), for every end it keeps."""
    now = [100.0]
    lease = LocalLease(30.0, sent_at=100.0, tracker_expires_ms=None, clock=lambda: now[0])
    assert lease.remaining_s() == pytest.approx(30.0 - lease.margin_s)
    assert not lease.expired() and not lease.released()
    now[0] = 130.0 - lease.margin_s  # the confirmed end, less the margin: work stops
    assert lease.expired() and lease.remaining_s() == 0.0 and not lease.released()
    now[0] = 130.0  # the latest end the tracker may hold: the report stops too
    assert lease.released()
    lease.extended(125.0, None)  # a heartbeat sent at 125 and answered now
    assert lease.expires_at == 155.0 and lease.held_until == 160.0 and not lease.expired()
