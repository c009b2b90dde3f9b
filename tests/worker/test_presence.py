"""Live workers from real ``backlog-worker run`` processes on one embedded rail, real signals.

Each process registers itself (pid, roles, slots) and shows the task it runs while it runs it;
SIGKILL leaves it ``lost`` once silent past ``lost_after_s``; SIGTERM makes it ``stopped`` (and
it exits 0). Processes sharing one configured agent id each show their own run. A worker whose
rail refuses the registration keeps working (the failure is logged once).
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import anyio
import pytest

from tests.faultproxy import FaultProxy, Hang
from tests.remote.fake_nulltickets import FakeNullTickets
from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings
from tracker_client.observe_models import WorkerInfo
from tracker_client.protocol import Tracker
from tracker_client.serve.app import create_app
from worker.config.models import WorkerConfig
from worker.daemon.claimer import Claimer
from worker.daemon.presence import GOODBYE_TIMEOUT_S, Presence
from worker.daemon.values import Role

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
LOST_AFTER_S = 1.0


def write_config(tmp_path: Path, db: Path, *, sleep: str = "60", extra: str = "") -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(
        f"""
[tracker]
url = "sqlite:///{db}"

[worker]
concurrency = 1
lease_ttl_s = 30
idle_min_s = 0.01
idle_max_s = 0.2
shutdown_grace_s = 0.2
maintenance_interval_s = 0.5
lost_after_s = {LOST_AFTER_S}
{extra}

[[roles]]
name = "coder"
executor = "command"
[roles.options]
argv = ["/bin/sleep", "{sleep}"]
"""
    )
    return path


@asynccontextmanager
async def rail(db: Path, tasks: int) -> AsyncIterator[Tracker]:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        if tasks:
            await tracker.create_tasks(
                [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(tasks)]
            )
        yield tracker
    finally:
        await tracker.aclose()


@contextmanager
def workers(config: Path, *argsets: tuple[str, ...]) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for n, args in enumerate(argsets):
            with (config.parent / f"worker-{n}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "worker", "run", "--config", str(config), *args],
                        stdout=subprocess.DEVNULL,
                        stderr=log,
                    )
                )
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


async def until(
    tracker: Tracker, ok: Callable[[dict[int, WorkerInfo]], bool], what: str, timeout: float = 60
) -> dict[int, WorkerInfo]:
    """Poll ``list_workers`` until ``ok`` holds for the workers by pid (a deadline, no sleeps
    for readiness)."""
    deadline = time.monotonic() + timeout
    while True:
        listed: list[WorkerInfo] = await tracker.call("list_workers")
        by_pid = {w.pid: w for w in listed}
        if ok(by_pid):
            return by_pid
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout}s; workers: {listed}")
        await anyio.sleep(0.05)


async def _reported(db: Path, tasks_by_pid: dict[int, str], timeout: float = 60) -> None:
    """Until each worker's own registration lists the run of its task (read off the file)."""
    deadline = time.monotonic() + timeout
    while True:
        with sqlite3.connect(db) as conn:
            rows = conn.execute(
                "SELECT w.pid, r.task_id FROM workers w, json_each(w.run_ids) j "
                "JOIN runs r ON r.id = j.value"
            ).fetchall()
        if all((pid, task) in rows for pid, task in tasks_by_pid.items()):
            return
        assert time.monotonic() < deadline, f"runs not reported in {timeout}s: {rows}"
        await anyio.sleep(0.05)


def _running(by_pid: dict[int, WorkerInfo], pid: int) -> list[str]:
    return [r.task_id for r in by_pid[pid].running] if pid in by_pid else []


async def test_alive_with_its_task_then_lost_after_sigkill_and_stopped_after_sigterm(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rail.db"
    config = write_config(tmp_path, db)
    async with rail(db, 2) as tracker:
        with workers(config, (), ()) as (killed, stopped):
            pids = (killed.pid, stopped.pid)
            both = await until(
                tracker,
                lambda w: all(len(_running(w, p)) == 1 for p in pids),
                "both workers alive, each with its task",
            )
            assert {both[p].state for p in pids} == {"alive"}
            assert [both[p].roles for p in pids] == [["coder"], ["coder"]]
            assert {both[p].slots for p in pids} == {1}
            assert {both[p].lost_after_ms for p in pids} == {1000}
            leased = {t.id for t in (await tracker.list_tasks()).items}
            assert {_running(both, p)[0] for p in pids} == leased  # two distinct tasks

            killed.send_signal(signal.SIGKILL)
            killed.wait(10)
            killed_at_ms = time.time() * 1000
            after = await until(
                tracker, lambda w: w[killed.pid].state == "lost", "the killed worker lost"
            )
            lost = after[killed.pid]
            assert lost.last_seen_at_ms <= killed_at_ms
            assert after[stopped.pid].state == "alive"  # still refreshing

            stopped.send_signal(signal.SIGTERM)
            assert stopped.wait(30) == 0
            gone = await until(
                tracker, lambda w: w[stopped.pid].state == "stopped", "the stopped worker"
            )
            assert gone[stopped.pid].running == []
            assert gone[killed.pid].state == "lost"


async def test_workers_sharing_an_agent_id_each_show_their_own_run(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    config = write_config(tmp_path, db)
    async with rail(db, 2) as tracker:
        with workers(config, ("--agent-id", "fleet"), ("--agent-id", "fleet")) as procs:
            pids = [p.pid for p in procs]
            both = await until(
                tracker,
                lambda w: all(len(_running(w, p)) == 1 for p in pids),
                "each worker with one run",
            )
            assert {both[p].agent_id for p in pids} == {"fleet"}
            first, second = (_running(both, p)[0] for p in pids)
            assert first != second
            # Until a worker's refresh has reported its run, the rail shows a run of a shared
            # agent id on the newest alive worker: kill only once both runs were reported.
            await _reported(db, {pids[0]: first, pids[1]: second})
            procs[0].send_signal(signal.SIGKILL)  # its run keeps its lease (30 s) meanwhile
            procs[0].wait(10)
            after = await until(tracker, lambda w: w[pids[0]].state == "lost", "lost")
            assert _running(after, pids[0]) == [first]  # what it said it held
            assert _running(after, pids[1]) == [second]  # not the dead one's run too


async def test_a_worker_keeps_working_when_its_registration_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    config = write_config(tmp_path, db, sleep="0")
    async with rail(db, 3) as tracker:
        # An agent id over the rail's 255-character bound: every registration is refused.
        with workers(config, ("--agent-id", "a" * 300)) as (proc,):
            deadline = time.monotonic() + 60
            while [t.stage for t in (await tracker.list_tasks()).items] != ["done"] * 3:
                assert time.monotonic() < deadline, "the worker did not finish its tasks"
                await anyio.sleep(0.05)
            assert await tracker.call("list_workers") == []
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        log = (tmp_path / "worker-0.log").read_text()
        assert log.count("could not refresh this worker in the rail's worker list") == 1
        assert "agent_id" in log


class _Source:
    """The worker as Presence reads it, without a claim loop (no runs in flight)."""

    def __init__(self, config: WorkerConfig) -> None:
        self.roles: tuple[Role, ...] = (cast(Role, SimpleNamespace(name="coder")),)
        self.config = config

    @property
    def claimer(self) -> Claimer:
        raise AssertionError("the claim loop is read only when there are runs")


class _NoRuns(_Source):
    @property
    def claimer(self) -> Claimer:
        return cast(Claimer, SimpleNamespace(runs=set()))


async def test_a_plain_nulltickets_rail_gets_no_registration() -> None:
    fake = FakeNullTickets()
    tracker = RemoteTracker(
        "http://127.0.0.1:7700", retry=RetrySettings(attempts=1), transport=fake.transport()
    )
    try:
        presence = Presence(tracker, _Source(WorkerConfig(agent_id="a")))
        with anyio.fail_after(5):
            await presence.run(await tracker.capabilities())  # returns at once: no extension
        await presence.goodbye()
        assert not presence.active
        assert [r.url.path for r in fake.requests] == ["/health"]
    finally:
        await tracker.aclose()


async def test_presence_off_registers_nothing(tmp_path: Path) -> None:
    async with rail(tmp_path / "rail.db", 0) as tracker:
        presence = Presence(tracker, _NoRuns(WorkerConfig(agent_id="a", presence=False)))
        await presence.run(await tracker.capabilities())
        assert await tracker.call("list_workers") == []


async def test_a_failing_refresh_is_logged_once_per_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with rail(tmp_path / "rail.db", 0) as tracker:
        source = _NoRuns(WorkerConfig(agent_id="x" * 300))
        presence = Presence(tracker, source)
        caps = await tracker.capabilities()
        with caplog.at_level("INFO", logger="backlog_worker.presence"):
            async with anyio.create_task_group() as tg:
                tg.start_soon(presence.run, caps)
                with anyio.fail_after(10):
                    while not presence.active:  # run() found the extension and registers
                        await anyio.sleep(0.01)
                for _ in range(3):
                    assert not await presence.refresh()  # refused: agent_id too long
                source.config = WorkerConfig(agent_id="fine", lost_after_s=0.5)
                assert await presence.refresh()
                tg.cancel_scope.cancel()
        messages = [r.getMessage() for r in caplog.records]
        assert sum("could not refresh" in m for m in messages) == 1
        assert sum("worker list again" in m for m in messages) == 1
        await presence.goodbye()
        (listed,) = await tracker.call("list_workers")
        assert (listed.id, listed.state, listed.agent_id) == (presence.worker_id, "stopped", "fine")


async def test_a_hung_rail_holds_a_refresh_and_the_goodbye_only_so_long(tmp_path: Path) -> None:
    """Through a real proxy that never answers ``/workers`` (the client's own timeout is a
    minute): a refresh gives up after its interval, the goodbye after GOODBYE_TIMEOUT_S."""
    embedded = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        async with serve_on_port(create_app(embedded)) as url:
            hang = Hang("/workers", rate=1.0, hang_s=None)  # never answered
            proxy = FaultProxy(int(url.rsplit(":", 1)[1]), hangs=[hang])
            async with proxy.serve() as proxy_url:
                remote = RemoteTracker(proxy_url, timeout_s=60, retry=RetrySettings(attempts=1))
                try:
                    source = _NoRuns(WorkerConfig(agent_id="a", lost_after_s=2.0))
                    presence = Presence(remote, source)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(presence.run, await remote.capabilities())
                        with anyio.fail_after(10):
                            while proxy.stats["hung"] == 0:  # the first registration hangs
                                await anyio.sleep(0.01)
                        started = time.monotonic()
                        assert not await presence.refresh()
                        assert time.monotonic() - started < 5  # its bound: 1 s
                        started = time.monotonic()
                        await presence.goodbye()
                        assert time.monotonic() - started < GOODBYE_TIMEOUT_S + 5
                        proxy.set_hangs([])  # the rail answers again
                        assert await presence.refresh()
                        tg.cancel_scope.cancel()
                    (listed,) = await embedded.list_workers()
                    assert (listed.id, listed.state) == (presence.worker_id, "alive")
                finally:
                    await remote.aclose()
    finally:
        await embedded.aclose()


async def test_a_registration_wakes_no_idle_worker_in_the_process(tmp_path: Path) -> None:
    async with rail(tmp_path / "rail.db", 0) as tracker:
        # Refreshed every 0.125 s for the whole wait.
        presence = Presence(tracker, _NoRuns(WorkerConfig(agent_id="a", lost_after_s=0.5)))
        seen: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(presence.run, await tracker.capabilities())
            started = time.monotonic()
            await tracker.wait_for_work(1.5)
            waited = time.monotonic() - started
            tg.cancel_scope.cancel()
        for worker in await tracker.call("list_workers"):
            seen.append(worker.last_seen_at_ms - presence.started_at_ms)
        assert seen and seen[0] >= 1000  # refreshed during the wait
        assert waited >= 1.4  # the wait ran its course: no refresh woke it
