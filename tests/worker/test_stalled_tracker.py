"""A hung heartbeat to a plain NullTickets server does not strand the task (issue 30 A1).

A plain NullTickets heartbeat resets every lease to 300 s whatever TTL was asked: once one has
landed, the task is the worker's for five minutes. The worker used to keep only the claim's TTL
(2 s here) as the lease's end, so one hung heartbeat after a landed one cancelled the run at
2 s, nothing was reported, and the task sat held until the tracker's 300 s expiry. Now the
local end follows what the tracker granted, and a run stopped before its lease was confirmed
is handed back (failed, retryable: NullTickets cannot release) while the tracker may hold it.

The tracker is a real ``tracker serve`` behind :class:`tests.faultproxy.FaultProxy` in
``plain_nulltickets`` mode (its heartbeat grants 300 s, its ``/health`` advertises nothing), the
worker a real ``backlog-worker run`` process.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest

from tests.faultproxy import FaultProxy, Hang
from tests.worker.daemonkit import (
    TOKEN,
    add_task,
    reap,
    run_outcomes,
    serve_tracker,
    spawn_worker,
    stage_and_expiry,
    wait_for,
    write_config,
)
from worker.lease import LocalLease

pytestmark = pytest.mark.timeout(90)

TTL_S = 2


def _drive(tmp_path: Path, hang: Hang, *, sleep_s: float) -> tuple[str, float, FaultProxy, str]:
    """One task through a worker whose tracker hangs as ``hang`` says; (task id, seconds from
    adding it to its reaching ``done``, the proxy, the worker's log)."""
    with serve_tracker(tmp_path) as (url, db):
        proxy = FaultProxy(int(url.rsplit(":", 1)[1]), hangs=[hang], plain_nulltickets=True)
        with proxy.start():
            config = write_config(
                tmp_path,
                proxy.url,
                token=TOKEN,
                argv=["sleep", str(sleep_s)],
                request_timeout_s=30,  # far past the TTL: only the lease's clock ends a call
                lease_ttl_s=TTL_S,
            )
            log = tmp_path / "worker.log"
            proc = spawn_worker(config, log)
            try:
                added = time.monotonic()
                task_id = add_task(db)
                wait_for(
                    lambda: stage_and_expiry(db, task_id)[0] == "done", 45, "the task to be done"
                )
                took = time.monotonic() - added
                stage, expires = stage_and_expiry(db, task_id)
                assert (stage, expires) == ("done", 0)  # no lease left held
                runs = run_outcomes(db, task_id)
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=20)
            finally:
                reap(proc)
    print(f"task done {took:.2f}s after it was added; runs {runs}; proxy {dict(proxy.stats)}")
    return task_id, took, proxy, log.read_text() + f"\nRUNS {runs}"


def test_a_hung_heartbeat_after_a_landed_one_does_not_strand_the_task(tmp_path: Path) -> None:
    # The first heartbeat lands (the lease is now 300 s at the tracker); the second hangs for
    # good. The run goes on under the lease the tracker granted and reports.
    hang = Hang("/heartbeat", nth=frozenset({2}), hang_s=None)
    _, took, proxy, log = _drive(tmp_path, hang, sleep_s=3 * TTL_S)
    assert proxy.stats["hung"] == 1 and proxy.stats["heartbeat_rewritten"] >= 2, proxy.stats
    assert proxy.stats["health_rewritten"] >= 1  # the worker saw a plain NullTickets server
    # One run, transitioned: not cancelled at the claim's 2 s TTL and left held for 300 s.
    assert "RUNS [('completed', None)]" in log, log
    assert "lease lost" not in log
    assert took < 3 * TTL_S + 10, took


def test_a_hung_heartbeat_that_landed_is_handed_back_within_its_lease(tmp_path: Path) -> None:
    # The first heartbeat reaches the tracker (300 s granted) but its answer never comes back:
    # the worker cannot confirm the lease, stops the executor at the claim's TTL and hands the
    # run back (a retryable fail) instead of leaving the task held for 300 s; the next run,
    # whose heartbeats get through, finishes it.
    hang = Hang("/heartbeat", nth=frozenset({1}), hang_s=None, landed=True)
    _, took, proxy, log = _drive(tmp_path, hang, sleep_s=TTL_S)
    assert proxy.stats["hung_landed"] == 1, proxy.stats
    assert "RUNS [('failed', \"lease_expired: " in log and "('completed', None)]" in log, log
    assert "lease is left to expire" not in log  # not released: failed at once
    assert took < 60, took  # far less than the 300 s the landed heartbeat granted


@pytest.mark.anyio
async def test_the_local_end_follows_what_a_nulltickets_heartbeat_granted() -> None:
    now = anyio.current_time()
    wall_ms = int(time.time() * 1000)
    lease = LocalLease(2.0, sent_at=now, tracker_expires_ms=wall_ms + 2_000, heartbeat_grant_s=300)
    assert lease.expires_at <= now + 2.0 and lease.report_deadline <= anyio.current_time() + 2.0
    work = lease.watch(anyio.CancelScope())
    report = lease.watch_report(anyio.CancelScope())
    # A heartbeat answered "300 s from now": the confirmed end (and every deadline) follows it.
    sent = anyio.current_time()
    lease.heartbeat_sent()
    lease.extended(sent, int(time.time() * 1000) + 300_000)
    assert 295 < lease.expires_at - sent <= 300.0 and work.deadline == lease.deadline
    assert lease.confirmed_at == sent
    confirmed = lease.expires_at
    # One sent and never answered: the confirmed end stays, but it may have landed and granted
    # 300 s more, so the report may go on until then.
    lease.heartbeat_sent()
    assert lease.expires_at == confirmed and report.deadline >= confirmed + 299
    lease.unanswered()
    assert lease.held_until >= anyio.current_time() + 299 and report.deadline == lease.held_until
    # Without a NullTickets grant a heartbeat grants the TTL asked, as before.
    plain = LocalLease(2.0, sent_at=now, tracker_expires_ms=None)
    plain.extended(now + 1.0, None)
    assert plain.expires_at == now + 3.0
