"""Across processes on one SQLite file, only writes that make work claimable wake an idle worker.

``PRAGMA data_version`` moves on every commit; the wake counter (tracker_client/embedded/
engine.py) tells a heartbeat or an event from a create, a transition or a retried failure. The
busy side is a real second process; an older release's writer (which bumps no counter) is a raw
connection committing without it, noticed by the once-a-second safety look.
"""

from __future__ import annotations

import sqlite3
import sys
import textwrap
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from tracker_client.embedded import EmbeddedTracker
from tracker_client.embedded.engine import SAFETY_LOOK_S, STATEMENTS
from tracker_client.embedded.wakeup import SUN_PATH_MAX
from tracker_client.models import TaskCreate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "go"}],
}

#: The busy process: holds two leases, heartbeats one and adds events in a loop until its
#: stdin closes; on a line naming an action, does it with the other lease (or creates a task).
BUSY = textwrap.dedent(
    """
    import sys, anyio
    from tracker_client.embedded import EmbeddedTracker
    from tracker_client.models import TaskCreate

    PIPELINE = {
        "initial": "todo",
        "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
        "transitions": [{"from": "todo", "to": "done", "trigger": "go"}],
    }

    async def main(path):
        t = await EmbeddedTracker.open(path)
        pid = await t.create_pipeline("p", PIPELINE)
        await t.create_task(TaskCreate(pipeline_id=pid, title="busy"))
        busy = await t.claim("busy", "r", 600_000)
        await t.create_task(TaskCreate(pipeline_id=pid, title="other"))
        other = await t.claim("other", "r", 600_000)
        assert busy is not None and other is not None
        commits = 0
        async with anyio.create_task_group() as tg:
            async def churn():
                nonlocal commits
                while True:
                    await t.heartbeat(busy)
                    await t.add_event(busy, "progress", {"n": commits})
                    commits += 2
                    await anyio.sleep(0.005)
            tg.start_soon(churn)
            print("ready", flush=True)
            while line := (await anyio.to_thread.run_sync(sys.stdin.readline)).strip():
                if line == "create":
                    await t.create_task(TaskCreate(pipeline_id=pid, title="new"))
                elif line == "transition":
                    await t.transition(other, "go")
                elif line == "fail":
                    await t.fail(other, "boom", retryable=True)
                print("done", flush=True)
            tg.cancel_scope.cancel()
        print(f"commits {commits}", flush=True)
        await t.aclose()

    anyio.run(main, sys.argv[1])
    """
)


class Busy:
    """The busy process's ends: send it an action, read its lines."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._lines = TextReceiveStream(process.stdout)
        self._buffer = ""

    async def line(self) -> str:
        while "\n" not in self._buffer:
            self._buffer += await self._lines.receive()
        line, _, self._buffer = self._buffer.partition("\n")
        return line

    async def send(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(text.encode() + b"\n")


@asynccontextmanager
async def busy_process(path: str) -> AsyncIterator[Busy]:
    async with await anyio.open_process([sys.executable, "-c", BUSY, path]) as process:
        busy = Busy(process)
        with anyio.fail_after(30):
            assert await busy.line() == "ready"
        try:
            yield busy
        finally:
            with anyio.fail_after(30):
                await busy.send("")  # an empty line: stop
                assert process.stdin is not None
                await process.stdin.aclose()
                await process.wait()
            assert process.returncode == 0


async def test_an_idle_waiter_sleeps_through_another_processs_heartbeats(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "rail.db")
    waiter = await EmbeddedTracker.open(path, poll_interval_s=0.02)
    try:
        async with busy_process(path) as busy:
            returns = 0
            began = anyio.current_time()
            while anyio.current_time() - began < 3.0:
                await waiter.wait_for_work(3.0 - (anyio.current_time() - began))
                returns += 1
            await busy.send("")
            commits = int((await busy.line()).split()[1])
    finally:
        await waiter.aclose()
    # Hundreds of commits of the other process; the waiter looked only on its safety look
    # (about once a second, mixed fleets' bound) instead of on each poll (~150 before).
    assert commits > 100, commits
    assert returns <= 3.0 / SAFETY_LOOK_S + 2, returns


@pytest.mark.parametrize("action", ["create", "transition", "fail"])
async def test_a_claimable_write_of_another_process_wakes_the_waiter_promptly(
    tmp_path: Path, action: str
) -> None:
    path = str(tmp_path / "rail.db")
    waiter = await EmbeddedTracker.open(path, poll_interval_s=0.02)
    try:
        async with busy_process(path) as busy:
            took: float | None = None
            async with anyio.create_task_group() as tg:

                async def wait() -> None:
                    nonlocal took
                    began = anyio.current_time()
                    await waiter.wait_for_work(30)
                    took = anyio.current_time() - began

                tg.start_soon(wait)
                await anyio.wait_all_tasks_blocked()
                await busy.send(action)
                with anyio.fail_after(30):
                    assert await busy.line() == "done"
    finally:
        await waiter.aclose()
    # Well inside the safety look: the wake counter woke it, not the once-a-second look.
    assert took is not None and took < SAFETY_LOOK_S / 2, took


@pytest.mark.parametrize("bumps", [False, True])
async def test_an_older_releases_commit_still_wakes_the_waiter_within_the_safety_look(
    tmp_path: Path, bumps: bool
) -> None:
    """A writer without the wake counter (a release before it) makes a task eligible: the
    waiter notices within about :data:`SAFETY_LOOK_S` (not on its 30 s timeout). So does it
    when the write bumps the counter but its datagram never comes (``bumps``: lost). The
    waiter's socket is bound: its poll is the safety net alone."""
    path = str(tmp_path / "rail.db")
    seeding = await EmbeddedTracker.open(path)
    try:
        pid = await seeding.create_pipeline("p", PIPELINE)
        await seeding.create_task(TaskCreate(pipeline_id=pid, title="later"))
    finally:
        await seeding.aclose()
    with closing(sqlite3.connect(path, isolation_level=None)) as old:
        old.execute("UPDATE tasks SET next_eligible_at_ms = 9000000000000000")
        waiter = await EmbeddedTracker.open(path, poll_interval_s=0.02)
        # The waiter's look (its change mark, then the next lease expiry, in one read) must come
        # before the old write: a write before the look is one the wait rightly never sees.
        # Waiting for all tasks to block is not enough: the read may still be queued on the
        # database thread (a loaded machine). Its statement on the connection says it ran.
        looked = threading.Event()

        def trace(statement: str) -> None:
            if "min(lease_expires_at_ms)" in statement:
                looked.set()

        conn = waiter.engine.db.conn
        await waiter.engine.db.run(lambda: conn.set_trace_callback(trace))
        try:
            took: float | None = None
            async with anyio.create_task_group() as tg:

                async def wait() -> None:
                    nonlocal took
                    began = anyio.current_time()
                    await waiter.wait_for_work(30)
                    took = anyio.current_time() - began

                tg.start_soon(wait)
                assert await anyio.to_thread.run_sync(looked.wait, 10), "the waiter never looked"
                await anyio.wait_all_tasks_blocked()
                # The older release's write: the task is claimable, no datagram sent (and
                # no wake counter bumped, unless ``bumps``).
                assert waiter.engine.wake is not None and waiter.engine.wake.listening
                old.execute("PRAGMA busy_timeout = 5000")
                old.execute("BEGIN IMMEDIATE")
                old.execute("UPDATE tasks SET next_eligible_at_ms = 0")
                if bumps:
                    old.execute(STATEMENTS["wake.bump"])
                old.execute("COMMIT")
        finally:
            await waiter.aclose()
    assert took is not None and took < SAFETY_LOOK_S * 3, took


@pytest.mark.parametrize("socket_bound", [True, False])
async def test_with_its_socket_bound_a_waiter_looks_about_once_a_second(
    tmp_path: Path, socket_bound: bool
) -> None:
    """Another process commits every few ms (heartbeats, events: no datagram). A waiter whose
    wake-up socket is bound looks at the file about once a second (the datagrams' safety net);
    one without a socket (its path over the system's limit) every ``poll_interval_s``. Looks
    are counted as SQLite runs them on the waiter's connection (its statement trace)."""
    base = tmp_path if socket_bound else tmp_path / ("d" * (SUN_PATH_MAX - len(str(tmp_path))))
    base.mkdir(exist_ok=True)
    path = str(base / "rail.db")
    waiter = await EmbeddedTracker.open(path, poll_interval_s=0.02)
    looks = 0

    def trace(statement: str) -> None:
        nonlocal looks
        looks += statement == "PRAGMA data_version"

    conn = waiter.engine.db.conn
    await waiter.engine.db.run(lambda: conn.set_trace_callback(trace))
    try:
        async with busy_process(path) as busy:
            began = anyio.current_time()
            while anyio.current_time() - began < 3.0:
                await waiter.wait_for_work(3.0 - (anyio.current_time() - began))
            await busy.send("")
            commits = int((await busy.line()).split()[1])
        assert waiter.engine.wake is not None
        assert waiter.engine.wake.listening is socket_bound
    finally:
        await waiter.aclose()
    assert commits > 100, commits
    if socket_bound:
        # A look every 0.75-1 s, each may end a wait, whose next read looks once more.
        assert looks <= 2 * (3.0 / (0.75 * SAFETY_LOOK_S) + 2), looks
    else:
        # About every 20 ms (the other process's commits move the WAL between looks).
        assert looks >= 30, looks
