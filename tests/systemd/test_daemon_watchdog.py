"""The watchdog follows real progress: a real ``backlog-worker run`` under a fake service manager
stops its WATCHDOG pings once its heartbeats wedge at a hung tracker, although its only slot is
busy (which used to count as healthy whatever happened)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.systemd.conftest import NotifyReceiver, busy_watched_worker
from tests.worker.daemonkit import (
    TOKEN,
    RouteFaults,
    serve_tracker,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_pings_stop_when_heartbeats_wedge(tmp_path: Path, path_receiver: NotifyReceiver) -> None:
    with serve_tracker(tmp_path) as (url, db), RouteFaults(int(url.rsplit(":", 1)[1])) as proxy:
        config = write_config(
            tmp_path,
            proxy.url,
            token=TOKEN,
            argv=["sleep", "60"],
            request_timeout_s=1,
            lease_ttl_s=3,  # progress budget: max(TTL 3 s, 3 x idle_max, 2 x request timeout)
        )
        with busy_watched_worker(config, db, path_receiver) as (proc, log):
            # Healthy while busy: heartbeats get through.
            path_receiver.recv_until(lambda m: m == "WATCHDOG=1", timeout=10)
            proxy.set("", "hang")  # every call from now on hangs at the tracker
            wait_for(lambda: "withholding watchdog ping" in log.read_text(), 30, "pings to stop")
            path_receiver.drain()
            # No ping in the next second (ten ping intervals) while nothing gets through.
            with pytest.raises(AssertionError, match="no matching notification") as info:
                path_receiver.recv_until(lambda m: m == "WATCHDOG=1", timeout=1.0)
            print(f"pings withheld; seen in a second without progress: {info.value}")
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
            proc.send_signal(signal.SIGTERM)
    text = log.read_text()
    assert "no progress for" in text, text
