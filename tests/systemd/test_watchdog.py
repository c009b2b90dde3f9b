"""The watchdog pings only while the loop makes progress: probe says so, loop not blocked."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from functools import partial

import anyio
import pytest

from worker.progress import ProgressMonitor
from worker.sdnotify import Notifier, Watchdog, report_status

INTERVAL = 0.01


async def _until(predicate, timeout: float = 10.0) -> None:
    """Poll ``predicate`` on the loop until it holds, failing at the deadline."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(INTERVAL / 2)


async def _recv_until(receiver, predicate, timeout: float = 10.0) -> list[str]:
    return await anyio.to_thread.run_sync(lambda: receiver.recv_until(predicate, timeout))


@pytest.mark.anyio
async def test_pings_at_the_interval_while_progressing(path_receiver):
    with Notifier(path_receiver.address) as notifier:
        watchdog = Watchdog(notifier, interval_s=INTERVAL)
        async with anyio.create_task_group() as tg:
            await tg.start(watchdog.run, lambda: True)
            await _until(lambda: watchdog.pings >= 3)
            tg.cancel_scope.cancel()
    messages = path_receiver.drain()
    assert messages[:3] == ["WATCHDOG=1"] * 3
    assert set(messages) == {"WATCHDOG=1"}


@pytest.mark.anyio
async def test_interval_comes_from_watchdog_usec(path_receiver):
    env = {"NOTIFY_SOCKET": path_receiver.address, "WATCHDOG_USEC": "20000"}
    with Notifier.from_env(env) as notifier:
        watchdog = Watchdog(notifier)
        assert watchdog.interval_s == 0.01
        async with anyio.create_task_group() as tg:
            await tg.start(watchdog.run, lambda: True)
            await _until(lambda: watchdog.pings >= 2)
            tg.cancel_scope.cancel()
    assert path_receiver.drain()[:2] == ["WATCHDOG=1", "WATCHDOG=1"]


@pytest.mark.anyio
async def test_pings_stop_while_the_probe_reports_no_progress(path_receiver, caplog):
    progressing = True
    calls_while_stalled = 0

    def probe() -> bool:
        nonlocal calls_while_stalled
        if not progressing:
            calls_while_stalled += 1
        return progressing

    with (
        caplog.at_level(logging.INFO, logger="backlog_worker.systemd"),
        Notifier(path_receiver.address) as notifier,
    ):
        watchdog = Watchdog(notifier, interval_s=INTERVAL)
        async with anyio.create_task_group() as tg:
            await tg.start(watchdog.run, probe)
            await _until(lambda: watchdog.pings >= 2)
            notifier.status("stalled")
            progressing = False
            await _until(lambda: calls_while_stalled >= 5)
            notifier.status("resumed")
            progressing = True
            pings = watchdog.pings
            await _until(lambda: watchdog.pings > pings)
            tg.cancel_scope.cancel()
    messages = path_receiver.drain()
    stalled = messages.index("STATUS=stalled")
    resumed = messages.index("STATUS=resumed")
    assert messages[stalled + 1 : resumed] == []  # not a single ping while stalled
    assert "WATCHDOG=1" in messages[:stalled]
    assert "WATCHDOG=1" in messages[resumed:]
    assert watchdog.withheld >= 5
    actions = [getattr(r, "action", None) for r in caplog.records]
    # Logged on the transitions only, not once per withheld ping.
    assert actions.count("watchdog_withheld") == 1
    assert actions.count("watchdog_resumed") == 1


@pytest.mark.anyio
async def test_a_progress_monitor_explains_why_pings_stopped(path_receiver, caplog):
    now = [0.0]
    monitor = ProgressMonitor(stall_after_s=30, clock=lambda: now[0])
    with (
        caplog.at_level(logging.ERROR, logger="backlog_worker.systemd"),
        Notifier(path_receiver.address) as notifier,
    ):
        watchdog = Watchdog(notifier, interval_s=INTERVAL)
        async with anyio.create_task_group() as tg:
            with monitor.call("tracker.claim", budget_s=10):
                await tg.start(watchdog.run, monitor)
                await _until(lambda: watchdog.pings >= 1)
                now[0] = 15.0  # the claim has been running 5 s past its budget
                await _until(lambda: watchdog.withheld >= 1)
            tg.cancel_scope.cancel()
    [record] = [r for r in caplog.records if getattr(r, "action", None) == "watchdog_withheld"]
    assert "tracker.claim stuck for 5.0s past its budget" in record.getMessage()


@pytest.mark.anyio
async def test_a_probe_that_raises_counts_as_no_progress(path_receiver, caplog):
    def probe() -> bool:
        raise ValueError("probe broke")

    with (
        caplog.at_level(logging.ERROR, logger="backlog_worker.systemd"),
        Notifier(path_receiver.address) as notifier,
    ):
        watchdog = Watchdog(notifier, interval_s=INTERVAL)
        async with anyio.create_task_group() as tg:
            await tg.start(watchdog.run, probe)
            await _until(lambda: watchdog.withheld >= 3)
            tg.cancel_scope.cancel()
    assert watchdog.pings == 0
    assert path_receiver.drain() == []
    assert any("probe broke" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_a_blocked_event_loop_sends_no_pings(path_receiver):
    with Notifier(path_receiver.address) as notifier:
        watchdog = Watchdog(notifier, interval_s=INTERVAL)
        async with anyio.create_task_group() as tg:
            await tg.start(watchdog.run, lambda: True)
            await _until(lambda: watchdog.pings >= 2)
            notifier.status("blocking")
            time.sleep(20 * INTERVAL)  # a wedged loop: synchronous work on the event loop
            notifier.status("unblocked")
            pings = watchdog.pings
            await _until(lambda: watchdog.pings > pings)
            tg.cancel_scope.cancel()
    messages = path_receiver.drain()
    blocking = messages.index("STATUS=blocking")
    assert messages[blocking + 1] == "STATUS=unblocked"  # twenty intervals, zero pings
    assert messages[blocking + 2] == "WATCHDOG=1"  # and they resume with the loop


@pytest.mark.anyio
@pytest.mark.parametrize(
    "env",
    [{}, {"NOTIFY_SOCKET": "@unused"}, {"NOTIFY_SOCKET": "@unused", "WATCHDOG_USEC": "0"}],
    ids=["no-socket", "no-watchdog", "watchdog-zero"],
)
async def test_without_socket_or_watchdog_run_returns_at_once(env):
    with Notifier.from_env(env) as notifier:
        watchdog = Watchdog(notifier)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                await tg.start(watchdog.run, lambda: True)
        assert watchdog.pings == 0


CHILD = textwrap.dedent(
    """
    import os, time, anyio
    from worker.sdnotify import Notifier, Watchdog

    async def main():
        notifier = Notifier.from_env(unset_environment=True)
        leaked = [k for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID") if k in os.environ]
        state = {"progress": True}
        watchdog = Watchdog(notifier)
        notifier.ready(status="leaked=" + ",".join(leaked))
        async with anyio.create_task_group() as tg:
            await tg.start(watchdog.run, lambda: state["progress"])
            while watchdog.pings < 3:
                await anyio.sleep(0.005)
            notifier.status("blocking")
            time.sleep(0.3)  # the event loop is wedged
            notifier.status("unblocked")
            pings = watchdog.pings
            while watchdog.pings == pings:
                await anyio.sleep(0.005)
            notifier.status("stalling")
            state["progress"] = False
            while watchdog.withheld < 5:
                await anyio.sleep(0.005)
            notifier.stopping(status="bye")
            tg.cancel_scope.cancel()
        notifier.close()

    anyio.run(main)
    """
)


@pytest.mark.timeout(30)
def test_a_real_process_under_a_fake_manager(path_receiver, tmp_path):
    """A child process reads $NOTIFY_SOCKET/$WATCHDOG_USEC like a service would."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {
        **os.environ,
        "NOTIFY_SOCKET": path_receiver.address,
        "WATCHDOG_USEC": "20000",  # 10 ms between pings
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    with subprocess.Popen([sys.executable, str(script)], env=env) as child:
        messages = path_receiver.recv_until(lambda m: m.startswith("STOPPING=1"), timeout=20)
        assert child.wait(timeout=10) == 0
    assert messages[0] == "READY=1\nSTATUS=leaked="  # children of the worker won't see them
    blocking = messages.index("STATUS=blocking")
    assert messages[1:blocking].count("WATCHDOG=1") >= 3
    assert messages[blocking + 1] == "STATUS=unblocked"
    stalling = messages.index("STATUS=stalling")
    assert messages[blocking + 2 : stalling].count("WATCHDOG=1") >= 1
    assert messages[stalling + 1 :] == ["STOPPING=1\nSTATUS=bye"]
    assert json.dumps(messages)  # plain text all the way


@pytest.mark.anyio
async def test_report_status_sends_changes_and_extends_while_draining(path_receiver):
    state = {"text": "running: 0/4 slots busy", "extend": None, "rounds": 0}

    def status() -> str:
        state["rounds"] += 1
        return state["text"]

    with Notifier(path_receiver.address) as notifier:
        async with anyio.create_task_group() as tg:
            await tg.start(
                partial(
                    report_status,
                    notifier,
                    status,
                    interval_s=INTERVAL,
                    extend_timeout=lambda: state["extend"],
                )
            )
            await _until(lambda: state["rounds"] >= 3)  # unchanged text is not re-sent
            state["text"] = "draining: 2/4 slots busy"
            state["extend"] = 35.0
            rounds = state["rounds"]
            await _until(lambda: state["rounds"] >= rounds + 2)
            tg.cancel_scope.cancel()
    messages = path_receiver.drain()
    assert messages[0] == "STATUS=running: 0/4 slots busy"
    assert messages[1] == "STATUS=draining: 2/4 slots busy"
    assert messages[2:4] == ["EXTEND_TIMEOUT_USEC=35000000"] * 2
    assert messages.count("STATUS=running: 0/4 slots busy") == 1


@pytest.mark.anyio
async def test_report_status_without_socket_returns_at_once():
    with anyio.fail_after(5), Notifier.from_env({}) as notifier:
        await report_status(notifier, lambda: "x")
