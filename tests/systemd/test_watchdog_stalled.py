"""A run lost to a hung tracker is not progress (issue 30 A5).

Progress used to be ticked when any run ended, however it ended: a run whose lease ran out
while the tracker hung counted as progress, so with a 6 s budget a real worker went on pinging
the watchdog about 10 s after the tracker hung. Only a claim answered, a heartbeat answered or
a report that landed is progress now: the pings stop within the budget of the hang.

A real ``backlog-worker run`` process reports to a fake ``NOTIFY_SOCKET`` (a unix datagram
socket this test reads); its tracker (a real ``tracker serve``) is reached through
:class:`tests.faultproxy.FaultProxy`, which hangs every request from a chosen moment.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.faultproxy import FaultProxy, Hang
from tests.systemd.conftest import NotifyReceiver, busy_watched_worker
from tests.worker.daemonkit import (
    TOKEN,
    serve_tracker,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TTL_S = 6
REQUEST_TIMEOUT_S = 3
#: The worker's progress budget: max(TTL, 3 x idle_max_s, 2 x request timeout).
BUDGET_S = max(TTL_S, 2 * REQUEST_TIMEOUT_S)


def test_pings_stop_within_the_budget_when_the_tracker_hangs(
    tmp_path: Path, path_receiver: NotifyReceiver
) -> None:
    with serve_tracker(tmp_path) as (url, db):
        proxy = FaultProxy(int(url.rsplit(":", 1)[1]))
        with proxy.start():
            config = write_config(
                tmp_path,
                proxy.url,
                token=TOKEN,
                argv=["sleep", "60"],
                request_timeout_s=REQUEST_TIMEOUT_S,
                lease_ttl_s=TTL_S,
            )
            with busy_watched_worker(config, db, path_receiver) as (proc, log):
                # Healthy while busy: a heartbeat gets through (every TTL/3).
                beats = proxy.stats["forwarded"]
                wait_for(lambda: proxy.stats["forwarded"] > beats + 1, 10, "heartbeats")
                path_receiver.recv_until(lambda m: m == "WATCHDOG=1", timeout=10)
                proxy.set_hangs([Hang("", rate=1.0, hang_s=None)])  # the tracker hangs
                hung_at = last_ping = time.monotonic()
                # Watch the pings for well past the old behaviour's ~10 s.
                while time.monotonic() < hung_at + BUDGET_S + 8:
                    try:
                        message = path_receiver.recv(0.2)
                    except TimeoutError:
                        continue
                    if message == "WATCHDOG=1":
                        last_ping = time.monotonic()
                assert proc.poll() is None
                proc.send_signal(signal.SIGTERM)
                proc.send_signal(signal.SIGTERM)
    pinged_for = last_ping - hung_at
    print(f"pings went on {pinged_for:.2f}s after the tracker hung (budget {BUDGET_S}s)")
    assert proxy.stats["hung"] >= 1
    # The last confirmation came at most TTL/3 before the hang: pings end within the budget.
    assert pinged_for <= BUDGET_S + 0.5, pinged_for
    assert "no progress for" in log.read_text()
