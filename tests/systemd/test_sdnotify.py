"""The sd_notify protocol against real AF_UNIX datagram sockets."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from pathlib import Path

import pytest

from worker.logs import REDACTED
from worker.progress import ProgressMonitor
from worker.sdnotify import Notifier, format_status, load_credential


def _monotonic_usec() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_messages_reach_the_socket(kind, request):
    receiver = request.getfixturevalue(f"{kind}_receiver")
    with Notifier.from_env({"NOTIFY_SOCKET": receiver.address}) as notifier:
        assert notifier.enabled
        assert notifier.ready(status="idle: 0/4 slots busy")
        assert notifier.status("busy: 3/4 slots")
        assert notifier.extend_timeout(12.5)
        assert notifier.watchdog()
        assert notifier.stopping(status="draining 3 tasks")
        assert notifier.watchdog_trigger()
    assert receiver.drain() == [
        "READY=1\nSTATUS=idle: 0/4 slots busy",
        "STATUS=busy: 3/4 slots",
        "EXTEND_TIMEOUT_USEC=12500000",
        "WATCHDOG=1",
        "STOPPING=1\nSTATUS=draining 3 tasks",
        "WATCHDOG=trigger",
    ]


def test_reloading_carries_monotonic_usec(path_receiver):
    with Notifier(path_receiver.address) as notifier:
        before = _monotonic_usec()
        assert notifier.reloading(status="reloading configuration")
        after = _monotonic_usec()
    lines = path_receiver.recv().split("\n")
    assert lines[0] == "RELOADING=1"
    key, _, value = lines[1].partition("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after
    assert lines[2] == "STATUS=reloading configuration"


def test_status_text_is_kept_on_one_line(path_receiver):
    with Notifier(path_receiver.address) as notifier:
        notifier.status("last error: boom\nREADY=1\n  trailing")
    # A newline in the text must not smuggle in another assignment.
    assert path_receiver.recv() == "STATUS=last error: boom READY=1 trailing"


def test_no_socket_makes_every_call_a_noop():
    notifier = Notifier.from_env({})
    assert not notifier.enabled
    results = [
        notifier.ready(),
        notifier.status("x"),
        notifier.stopping(),
        notifier.reloading(),
        notifier.extend_timeout(5),
        notifier.watchdog(),
        notifier.notify("X=1"),
    ]
    assert results == [False] * len(results)
    assert notifier.watchdog_interval() is None
    assert notifier._sock is None  # nothing was even opened
    notifier.close()


def test_unset_environment_removes_the_variables_children_would_inherit(path_receiver):
    env = {
        "NOTIFY_SOCKET": path_receiver.address,
        "WATCHDOG_USEC": "2000000",
        "WATCHDOG_PID": str(os.getpid()),
        "PATH": "/usr/bin",
    }
    with Notifier.from_env(env, unset_environment=True) as notifier:
        assert env == {"PATH": "/usr/bin"}
        # The notifier kept what it read.
        assert notifier.watchdog_interval() == 1.0
        assert notifier.ready()
    assert path_receiver.recv() == "READY=1"


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        ("30000000", None, 15.0),
        ("30000000", "self", 15.0),
        ("30000000", "other", None),
        ("0", None, None),
        (None, None, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec_for_this_pid(usec, pid, expected):
    env = {"NOTIFY_SOCKET": "/run/nonexistent/notify"}
    if usec is not None:
        env["WATCHDOG_USEC"] = usec
    if pid == "self":
        env["WATCHDOG_PID"] = str(os.getpid())
    elif pid == "other":
        env["WATCHDOG_PID"] = str(os.getpid() + 1)
    assert Notifier.from_env(env).watchdog_interval() == expected


@pytest.mark.parametrize(
    ("usec", "pid", "named"),
    [("soon", None, "WATCHDOG_USEC='soon'"), ("1000", "me", "WATCHDOG_PID='me'")],
)
def test_bad_watchdog_variables_are_ignored_with_a_clear_warning(usec, pid, named, caplog):
    env = {"WATCHDOG_USEC": usec, **({"WATCHDOG_PID": pid} if pid else {})}
    with caplog.at_level(logging.WARNING, logger="backlog_worker.systemd"):
        notifier = Notifier.from_env(env)
        assert notifier.watchdog_interval() is None
        assert notifier.watchdog_interval() is None
    warnings = [r for r in caplog.records if named in r.getMessage()]
    assert len(warnings) == 1  # logged once, not per call


def test_unusable_address_disables_the_notifier_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="backlog_worker.systemd"):
        notifier = Notifier("vsock:2:1234")
        assert not notifier.enabled
        assert not notifier.ready()
    assert [r.getMessage() for r in caplog.records] == [
        "NOTIFY_SOCKET 'vsock:2:1234' is not an AF_UNIX address "
        "(further errors of this kind are not logged)"
    ]


def test_send_errors_are_logged_once_and_never_raised(tmp_path, caplog):
    missing = tmp_path / "gone"  # the manager's socket vanished
    with (
        caplog.at_level(logging.WARNING, logger="backlog_worker.systemd"),
        Notifier(str(missing)) as notifier,
    ):
        assert [notifier.watchdog() for _ in range(5)] == [False] * 5
    failures = [r for r in caplog.records if getattr(r, "action", None) == "sd_notify_failed"]
    assert len(failures) == 1
    assert str(missing) in failures[0].getMessage()


def test_a_full_socket_queue_never_blocks_the_sender(path_receiver, caplog):
    # Nobody reads the receiver: the kernel queue fills up. A blocking socket would hang here
    # (and the test would time out); the notifier drops the message instead.
    with (
        caplog.at_level(logging.WARNING, logger="backlog_worker.systemd"),
        Notifier(path_receiver.address) as notifier,
    ):
        results = [notifier.status("x" * 1024) for _ in range(5000)]
    assert results[0] is True
    assert False in results
    assert results.count(False) > 0
    eagain = [r for r in caplog.records if "sd_notify" in r.getMessage()]
    assert len(eagain) == 1
    # What was queued is intact and in order.
    assert path_receiver.recv() == "STATUS=" + "x" * 1024


def test_close_is_idempotent_and_later_calls_are_noops(path_receiver):
    notifier = Notifier(path_receiver.address)
    assert notifier.ready()
    notifier.close()
    notifier.close()
    assert not notifier.enabled
    assert not notifier.status("after close")
    assert path_receiver.drain() == ["READY=1"]


def test_repr_names_only_the_socket():
    assert repr(Notifier("@sock")) == "Notifier(notify_socket='@sock')"


def test_the_socket_is_not_inherited_by_children(path_receiver):
    with Notifier(path_receiver.address) as notifier:
        notifier.ready()
        assert notifier._sock is not None
        assert not os.get_inheritable(notifier._sock.fileno())
        assert notifier._sock.type == socket.SOCK_DGRAM
        assert not notifier._sock.getblocking()


# -- ProgressMonitor ----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_progress_monitor_fails_after_stall_and_recovers_on_tick():
    clock = FakeClock()
    monitor = ProgressMonitor(stall_after_s=10, clock=clock)
    assert monitor() and monitor.problem() is None
    clock.now += 10.5
    assert not monitor()
    assert monitor.problem() == "no progress for 10.5s (limit 10s)"
    monitor.tick()
    assert monitor()


def test_progress_monitor_fails_while_a_call_is_past_its_budget():
    clock = FakeClock()
    monitor = ProgressMonitor(stall_after_s=60, clock=clock)
    with monitor.call("tracker.claim", budget_s=5):
        clock.now += 4
        assert monitor()
        clock.now += 3
        monitor.tick()  # other progress does not excuse a stuck call
        assert not monitor()
        assert monitor.problem() == "tracker.claim stuck for 2.0s past its budget"
    assert monitor()  # the call returned


def test_progress_monitor_call_is_released_on_error():
    monitor = ProgressMonitor(stall_after_s=60, clock=FakeClock())
    with pytest.raises(RuntimeError), monitor.call("tracker.heartbeat", budget_s=1):
        raise RuntimeError("boom")
    assert monitor._calls == {}


# -- credentials --------------------------------------------------------------------------------


def test_load_credential_reads_from_credentials_directory(tmp_path: Path):
    (tmp_path / "api-token").write_text("s3cret-token\n")
    env = {"CREDENTIALS_DIRECTORY": str(tmp_path)}
    assert load_credential("api-token", env) == "s3cret-token"
    assert load_credential("api-token", env, strip=False) == "s3cret-token\n"
    assert load_credential("missing", env) is None
    assert load_credential("api-token", {}) is None
    assert load_credential("../api-token", env) is None


# -- STATUS helpers -----------------------------------------------------------------------------


def test_status_never_shows_a_secret(path_receiver):
    lease_token = secrets.token_hex(32)
    with Notifier(path_receiver.address) as notifier:
        notifier.status(f"last error: lease {lease_token} lost")
    assert path_receiver.recv() == f"STATUS=last error: lease {REDACTED} lost"


def test_format_status():
    assert (
        format_status(state="running", busy=3, slots=4, done=120, failed=2)
        == "running: 3/4 slots busy, 120 done, 2 failed"
    )
    text = format_status(
        state="draining", busy=1, slots=4, done=0, failed=0, last_error="boom\n" + "x" * 300
    )
    assert text.startswith("draining: 1/4 slots busy, 0 done, 0 failed; last error: boom xxx")
    assert len(text) < 260 and text.endswith("…")
