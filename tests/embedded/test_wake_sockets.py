"""The cross-process wake-up of an embedded rail: a datagram socket per waiting instance.

Each waiter here polls every 30 s (``poll_interval_s``) and idles 30 s: a pickup, a wake-up or a
finished wait inside the test's 20 s bound can only have come from a socket
(tracker_client/embedded/wakeup.py). The other processes are real ones: a ``worker run``, the
CLI's ``submit``, a process killed with its socket left behind.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from tracker_client.embedded import EmbeddedTracker
from tracker_client.embedded.wakeup import SUN_PATH_MAX, wake_dir
from tracker_client.models import TaskCreate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "go"}],
}
ROOT = Path(__file__).resolve().parents[2]
#: Longer than any wait of these tests: a poll never ends one.
SLOW_POLL = "?poll_interval_s=30"


def _sockets(path: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(wake_dir(path)) if n.endswith(".sock"))
    except FileNotFoundError:
        return []


async def _until(condition: object) -> None:
    """Look at ``condition()`` until it holds (a readiness condition, under a deadline)."""
    assert callable(condition)
    with anyio.fail_after(20):
        while not condition():
            await anyio.sleep(0.01)  # polling a file the other process makes, not a guess


async def _wait_woken(waiter: EmbeddedTracker, write: object) -> None:
    """``waiter.wait_for_work(30)`` ended by ``write()`` (of another instance) inside 20 s."""
    assert callable(write)
    async with anyio.create_task_group() as tg:
        woken = anyio.Event()

        async def wait() -> None:
            await waiter.wait_for_work(30)
            woken.set()

        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        await write()
        with anyio.fail_after(20):
            await woken.wait()


async def test_a_write_of_another_instance_wakes_a_waiter_by_its_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "rail.db")
    waiter = await EmbeddedTracker.open(path, poll_interval_s=30)
    writer = await EmbeddedTracker.open(path)
    try:
        for n in range(3):  # the same socket, again and again
            await _wait_woken(waiter, lambda n=n: writer.create_pipeline(f"p{n}", PIPELINE))
        assert waiter.engine.woken == 0  # never by the poll
        assert len(_sockets(path)) == 1  # the waiter's; the writer waits for nothing
    finally:
        await waiter.aclose()
        await writer.aclose()
    assert _sockets(path) == []  # a closed instance removes its socket
    assert not os.path.exists(wake_dir(path))  # and the last one out, the directory


async def test_a_busy_neighbour_wakes_an_instance_nobody_waits_on_once(tmp_path: Path) -> None:
    """With nobody waiting, one byte stops the loop reading the socket: a neighbour's commits
    do not wake the loop one by one (a worker draining beside others), and those that came
    meanwhile still move the change mark as the next wait begins."""
    path = str(tmp_path / "rail.db")
    waiter = await EmbeddedTracker.open(path, poll_interval_s=30)
    writer = await EmbeddedTracker.open(path)
    try:
        await waiter.wait_for_work(0)  # binds its socket; nobody waits from here on
        changes = waiter.engine.changes
        seq = changes.seq
        for n in range(5):
            await writer.create_pipeline(f"p{n}", PIPELINE)  # its byte sent on return
            for _ in range(3):  # loop passes: a byte read would be read by now
                await anyio.lowlevel.checkpoint()
        assert changes.seq == seq + 1  # the first byte; the others wait in the socket
        mark = str(changes.seq)
        with anyio.fail_after(20):  # the wait returns at once: changes came since the mark
            assert await waiter.wait_for_work(30, since=mark) != mark
        assert waiter.engine.woken == 0
        await _wait_woken(waiter, lambda: writer.create_pipeline("p5", PIPELINE))
    finally:
        await waiter.aclose()
        await writer.aclose()


async def test_the_directory_stays_while_a_neighbour_listens(tmp_path: Path) -> None:
    path = str(tmp_path / "rail.db")
    first = await EmbeddedTracker.open(path, poll_interval_s=30)
    second = await EmbeddedTracker.open(path, poll_interval_s=30)
    writer = await EmbeddedTracker.open(path)
    try:
        await _wait_woken(first, lambda: writer.create_pipeline("p0", PIPELINE))
        await _wait_woken(second, lambda: writer.create_pipeline("p1", PIPELINE))
        await first.aclose()
        assert len(_sockets(path)) == 1  # the neighbour's socket and directory stay
        await _wait_woken(second, lambda: writer.create_pipeline("p2", PIPELINE))
    finally:
        await first.aclose()
        await second.aclose()
        await writer.aclose()
    assert not os.path.exists(wake_dir(path))


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_waiter_on_another_loop_than_asyncio_is_woken_by_a_thread(
    tmp_path: Path, anyio_backend: str
) -> None:
    """asyncio reads the socket on its loop (``add_reader``); trio has a thread block on it."""
    path = str(tmp_path / "rail.db")
    waiter = await EmbeddedTracker.open(path, poll_interval_s=30)
    writer = await EmbeddedTracker.open(path)
    try:
        for n in range(2):
            await _wait_woken(waiter, lambda n=n: writer.create_pipeline(f"p{n}", PIPELINE))
        assert waiter.engine.woken == 0
        assert "rail-wake" in {t.name for t in threading.enumerate()}
    finally:
        await waiter.aclose()
        await writer.aclose()
    assert _sockets(path) == []
    assert "rail-wake" not in {t.name for t in threading.enumerate()}


async def test_a_submit_from_another_process_wakes_an_idle_worker_process(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    url = f"sqlite:///{db}{SLOW_POLL}"
    seed = await EmbeddedTracker.open(str(db))
    try:
        await seed.create_pipeline("p", PIPELINE)
    finally:
        await seed.aclose()
    config = tmp_path / "worker.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [tracker]
            url = "{url}"
            [worker]
            drain = false
            idle_min_s = 30
            idle_max_s = 30
            [[roles]]
            name = "r"
            executor = "command"
            [roles.options]
            argv = ["/bin/true"]
            """
        )
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "worker", "run", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        await _until(lambda: _sockets(str(db)) or worker.poll() is not None)
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
        # The CLI's submit is a third process; its --wait is woken by the worker's finish.
        argv = ["-m", "worker", "submit", "-p", "p", "ping", "--wait", "--timeout", "20s"]
        submit = await anyio.run_process(
            [sys.executable, *argv, "--tracker", url],
            cwd=ROOT,
            check=False,
        )
        assert submit.returncode == 0, submit.stderr.decode()[-2000:]
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err.decode()[-2000:]
    assert _sockets(str(db)) == []  # both processes removed theirs


def _received(sock: socket.socket) -> int:
    """The bytes waiting in ``sock`` (read, without blocking)."""
    n = 0
    while True:
        try:
            n += len(sock.recv(16, socket.MSG_DONTWAIT))
        except BlockingIOError:
            return n


async def test_only_a_write_that_makes_work_claimable_rings(tmp_path: Path) -> None:
    """A heartbeat, an event or a claim sends nothing; a create or a transition one byte. The
    send is done before the write answers (right after its commit), so the count is exact."""
    path = str(tmp_path / "rail.db")
    writer = await EmbeddedTracker.open(path)
    os.mkdir(wake_dir(path), 0o700)
    # Another instance's socket, as its first wait would bind it.
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as other:
        other.bind(os.path.join(wake_dir(path), f"{os.getpid()}.999999.sock"))
        try:
            pid = await writer.create_pipeline("p", PIPELINE)
            assert _received(other) == 1
            await writer.create_task(TaskCreate(pipeline_id=pid, title="t"))
            assert _received(other) == 1
            lease = await writer.claim("a", "r", 60_000)
            assert lease is not None
            await writer.heartbeat(lease)
            await writer.add_event(lease, "progress", {"n": 1})
            assert _received(other) == 0
            await writer.transition(lease, "go")
            assert _received(other) == 1
        finally:
            await writer.aclose()


def _dead_socket(where: str) -> None:
    """A socket file left by a process that is gone (killed before it could remove it)."""
    code = (
        "import os, signal, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(sys.argv[1])\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, where], check=False, timeout=30)
    assert done.returncode == -signal.SIGKILL
    assert os.path.exists(where)


async def test_a_sender_removes_the_socket_of_a_dead_process(tmp_path: Path) -> None:
    path = str(tmp_path / "rail.db")
    waiter = await EmbeddedTracker.open(path, poll_interval_s=30)
    writer = await EmbeddedTracker.open(path)
    try:
        await _wait_woken(waiter, lambda: writer.create_pipeline("p0", PIPELINE))
        live = _sockets(path)
        stale = os.path.join(wake_dir(path), f"{_reaped_pid()}.0.sock")
        _dead_socket(stale)
        await _wait_woken(waiter, lambda: writer.create_pipeline("p1", PIPELINE))
        assert _sockets(path) == live  # the stale one went; the live waiter's stayed
    finally:
        await waiter.aclose()
        await writer.aclose()


def _reaped_pid() -> int:
    """The pid of a child that has exited and been reaped (nobody has it now)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait(30)
    return child.pid


async def test_a_new_waiter_removes_the_socket_of_a_dead_process(tmp_path: Path) -> None:
    path = str(tmp_path / "rail.db")
    os.mkdir(wake_dir(path), 0o700)
    stale = os.path.join(wake_dir(path), f"{_reaped_pid()}.0.sock")
    _dead_socket(stale)
    waiter = await EmbeddedTracker.open(path, poll_interval_s=30)
    try:
        with anyio.move_on_after(0):
            await waiter.wait_for_work(0)  # its first wait binds its socket
        assert not os.path.exists(stale)
        assert len(_sockets(path)) == 1
    finally:
        await waiter.aclose()


async def test_a_socket_of_a_live_process_is_kept_though_nobody_is_bound(tmp_path: Path) -> None:
    """Refused, but its pid lives (an instance closing, another pid namespace): left alone."""
    path = str(tmp_path / "rail.db")
    os.mkdir(wake_dir(path), 0o700)
    where = os.path.join(wake_dir(path), f"{os.getpid()}.999999.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(where)
    waiter = await EmbeddedTracker.open(path, poll_interval_s=30)
    writer = await EmbeddedTracker.open(path)
    try:
        await _wait_woken(waiter, lambda: writer.create_pipeline("p", PIPELINE))
        assert os.path.exists(where)
    finally:
        await waiter.aclose()
        await writer.aclose()


async def test_a_socket_path_over_the_limit_falls_back_to_the_poll_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    deep = tmp_path / ("d" * (SUN_PATH_MAX - len(str(tmp_path)) - 12))
    deep.mkdir()
    path = str(deep / "rail.db")
    waiter = await EmbeddedTracker.open(path, poll_interval_s=0.02)
    writer = await EmbeddedTracker.open(path)
    try:
        with caplog.at_level(logging.WARNING, logger="backlog_worker.tracker"):
            async with anyio.create_task_group() as tg:
                woken = anyio.Event()

                async def wait() -> None:
                    await waiter.wait_for_work(30)
                    woken.set()

                tg.start_soon(wait)
                # Woken all the same, by the poll; which can only see a write after the
                # waiter's look (the socket would have caught one before it): write until.
                with anyio.fail_after(20):
                    n = 0
                    while not woken.is_set():
                        await writer.create_pipeline(f"p{n}", PIPELINE)
                        n += 1
                        with anyio.move_on_after(0.05):
                            await woken.wait()
        assert waiter.engine.woken >= 1
        assert waiter.engine.wake is not None and not waiter.engine.wake.listening
    finally:
        await waiter.aclose()
        await writer.aclose()
    [record] = [r for r in caplog.records if r.action == "wake_socket_path_too_long"]  # type: ignore[attr-defined]
    message = record.getMessage()
    assert "over the system's limit of 107" in message and "polling" in message
    assert str(deep) in message


async def test_the_wake_directory_is_the_owners_only(tmp_path: Path) -> None:
    path = str(tmp_path / "rail.db")
    os.mkdir(wake_dir(path), 0o755)  # made wider by hand: narrowed
    os.chmod(wake_dir(path), 0o755)
    waiter = await EmbeddedTracker.open(path, poll_interval_s=30)
    try:
        with anyio.move_on_after(0):
            await waiter.wait_for_work(0)
        assert stat.S_IMODE(os.stat(wake_dir(path)).st_mode) == 0o700
        assert waiter.engine.wake is not None and waiter.engine.wake.listening
    finally:
        await waiter.aclose()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
async def test_a_wake_directory_of_another_user_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "rail.db")
    os.mkdir(wake_dir(path), 0o700)
    os.chown(wake_dir(path), 65534, 65534)
    waiter = await EmbeddedTracker.open(path, poll_interval_s=30)
    try:
        with caplog.at_level(logging.WARNING, logger="backlog_worker.tracker"):
            with anyio.move_on_after(0):
                await waiter.wait_for_work(0)
        assert waiter.engine.wake is not None and not waiter.engine.wake.listening
        assert os.listdir(wake_dir(path)) == []
    finally:
        await waiter.aclose()
    [record] = [r for r in caplog.records if r.action == "wake_socket_unavailable"]  # type: ignore[attr-defined]
    assert "belongs to uid 65534" in record.getMessage()
