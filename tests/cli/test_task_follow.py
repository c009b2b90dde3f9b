"""``task show ID --follow`` as real processes: a follower subprocess prints each event of a
running task as it is written and exits with the task's outcome code, on an embedded rail and on
a real ``tracker serve``.

The events come from a producer writing through the lease API (the test holds the lease) or
from a real ``backlog-worker run`` whose python executor waits, between its events, until the
follower has printed the previous one: each step waits for a line of the follower's stdout (a
real condition under a deadline), never for a fixed time. Also: ``--json`` lines, a finished
task (at once), Ctrl-C (130), a tracker that goes away (3), bad input, and the polling fallback
of a rail without the ``follow`` extension (a plain NullTickets imitation).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO

import anyio
import pytest

from tests.cli.conftest import Rail, invoke
from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tests.remote.fixtures import wait_listening
from tracker_client.factory import open_tracker
from tracker_client.models import Lease, TaskCreate
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.nulltickets.options import RetrySettings
from tracker_client.protocol import Tracker
from worker.cli.ops.task.follow import follow_events

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

SERVE = (sys.executable, "-m", "worker", "tracker", "serve")
#: How long one expected line may take (generous: a loaded CI machine).
LINE_S = 30.0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["COLUMNS"] = "200"
    return env


class Proc:
    """A real ``backlog-worker`` subprocess whose stdout and stderr lines are read as they come."""

    def __init__(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "worker", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env or _env(),
            cwd=cwd,
        )
        self.out: queue.Queue[str | None] = queue.Queue()
        self.err: queue.Queue[str | None] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        for pipe, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(pipe, into), daemon=True).start()

    @staticmethod
    def _pump(pipe: IO[str] | None, into: queue.Queue[str | None]) -> None:
        assert pipe is not None
        for line in pipe:
            into.put(line.rstrip("\n"))
        into.put(None)

    def line(self, needle: str, *, err: bool = False) -> str:
        """The next line (of stdout, or stderr) holding ``needle``; AssertionError on EOF or
        after :data:`LINE_S`."""
        source, seen = (self.err, self.stderr) if err else (self.out, self.stdout)
        deadline = time.monotonic() + LINE_S
        while True:
            try:
                line = source.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {needle!r} yet: {seen}") from None
            if line is None:
                source.put(None)
                raise AssertionError(f"ended without a line with {needle!r}: {seen}")
            seen.append(line)
            if needle in line:
                return line

    def finish(self) -> int:
        """The exit code (after the pipes are read to their end)."""
        code = self.proc.wait(timeout=LINE_S)
        for source, seen in ((self.out, self.stdout), (self.err, self.stderr)):
            while (line := source.get(timeout=LINE_S)) is not None:
                seen.append(line)
            source.put(None)
        self.reap()
        assert not any("Traceback" in line for line in self.stderr), self.stderr
        return code

    def reap(self) -> None:
        """Kill it if it still runs (a failed test leaks no process)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=LINE_S)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


async def line(proc: Proc, needle: str, *, err: bool = False) -> str:
    """:meth:`Proc.line` off the event loop (the producer's tracker keeps running)."""
    return await anyio.to_thread.run_sync(lambda: proc.line(needle, err=err))


@contextmanager
def following(url: str, task_id: str, *flags: str) -> Iterator[Proc]:
    """A real ``task show TASK --follow`` subprocess, once it says it is following."""
    follower = Proc("task", "show", task_id, "--follow", "--tracker", url, *flags)
    try:
        if "--json" not in flags:
            follower.line("following task", err=True)
        yield follower
    finally:
        follower.reap()


@contextmanager
def served(path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real ``tracker serve`` of the rail at ``path`` on a free 127.0.0.1 port."""
    log = path.with_suffix(".serve.log")
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*SERVE, "--tracker", f"sqlite:///{path}", "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_env(),
        )
    try:
        yield wait_listening(log, proc), proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=LINE_S)


@pytest.fixture(params=["embedded", "served"])
def rail_url(request: pytest.FixtureRequest, simple: Rail) -> Iterator[str]:
    """The ``simple`` rail: its file, or a real ``tracker serve`` of it."""
    if request.param == "embedded":
        yield simple.url
        return
    with served(simple.path) as (url, _):
        yield url


@asynccontextmanager
async def leased(url: str) -> AsyncIterator[tuple[Tracker, Lease]]:
    """A producer on the rail: a new task of ``simple``, claimed (the test holds the lease)."""
    tracker = await open_tracker(url)
    try:
        (pipeline,) = [p for p in await tracker.list_pipelines() if p.name == "simple"]
        await tracker.create_task(TaskCreate(pipeline_id=pipeline.id, title="followed"))
        lease = await tracker.claim("producer", "coder", 120_000)
        assert lease is not None
        yield tracker, lease
    finally:
        await tracker.aclose()


async def test_each_event_is_printed_before_the_next_is_written_then_exit_0(
    rail_url: str,
) -> None:
    async with leased(rail_url) as (tracker, lease):
        await tracker.add_event(lease, "progress", {"step": "before"})  # shown by task show
        with following(rail_url, lease.task.id) as follower:
            await line(follower, "step=before")  # the events table of task show
            for step in range(3):
                await tracker.add_event(lease, "progress", {"step": step})
                printed = await line(follower, f"step={step}")
                assert "#1  progress" in printed
            await tracker.transition(lease, "complete")
            await line(follower, "complete: todo -> done")
            await line(follower, f"task {lease.task.id} done: stage done")
            assert follower.finish() == 0
    assert sum("step=" in out for out in follower.stdout) == 4  # no event printed twice


async def test_a_dead_lettered_task_ends_the_follow_with_exit_1(rail_url: str) -> None:
    async with leased(rail_url) as (tracker, lease):
        with following(rail_url, lease.task.id) as follower:
            await tracker.add_event(lease, "progress", {"step": 1})
            await line(follower, "step=1")
            await tracker.fail(lease, "the disk is full", retryable=False)
            await line(follower, "permanent_failure")
            assert follower.finish() == 1
    assert any("dead-lettered (permanent_failure)" in e for e in follower.stderr)
    assert any("the disk is full" in e for e in follower.stderr)


async def test_a_task_cancelled_from_the_cli_ends_the_follow_with_exit_1(rail_url: str) -> None:
    async with leased(rail_url) as (_, lease):
        with following(rail_url, lease.task.id) as follower:
            cancel = Proc("task", "cancel", lease.task.id, "--tracker", rail_url)
            assert cancel.finish() == 0
            await line(follower, "cancelled")
            assert follower.finish() == 1
    assert any(f"task {lease.task.id} was cancelled" in e for e in follower.stderr)


async def test_json_is_one_object_per_line(simple: Rail) -> None:
    async with leased(simple.url) as (tracker, lease):
        with following(simple.url, lease.task.id, "--json") as follower:
            first = json.loads(await line(follower, '"task"'))
            assert first["task"]["id"] == lease.task.id and first["events"] == []
            await tracker.add_event(lease, "progress", {"step": 1})
            event = json.loads(await line(follower, '"event"'))
            assert (event["event"]["kind"], event["event"]["data"]) == ("progress", {"step": 1})
            await tracker.transition(lease, "complete")
            end = json.loads(await line(follower, '"finished"'))
            assert follower.finish() == 0
    assert (end["outcome"], end["exit_code"], end["task"]["stage"]) == ("done", 0, "done")
    assert [json.loads(x)["event"]["kind"] for x in follower.stdout[1:-1]] == [
        "progress",
        "transition",
    ]


JOB = '''
import anyio
from pathlib import Path
from plugins.api import Transition


async def run(ctx):
    """Three events, each after the follower printed the one before (a file says so)."""
    gate = Path(ctx.task.metadata["gate"])
    for step in range(3):
        await ctx.report("progress", {"step": step}, flush=True)
        with anyio.fail_after(60):
            while not (gate / f"seen-{step}").exists():
                await anyio.sleep(0.02)  # polling a real condition (the file) under a deadline
    if ctx.task.metadata.get("broken"):
        raise RuntimeError("the job broke")
    return Transition()
'''


@pytest.mark.parametrize(("broken", "code"), [(False, 0), (True, 1)])
def test_a_real_worker_run_is_followed_event_by_event(
    simple: Rail, tmp_path: Path, broken: bool, code: int
) -> None:
    (tmp_path / "gated_job.py").write_text(JOB)
    config = tmp_path / "worker.toml"
    config.write_text(
        textwrap.dedent(f"""
        log_level = "WARNING"
        [tracker]
        url = "{simple.url}"
        [worker]
        drain = true
        [[roles]]
        name = "coder"
        executor = "python"
        [roles.options]
        callable = "gated_job:run"
        """)
    )
    meta = json.dumps({"gate": str(tmp_path), "broken": broken})
    task_id = simple.add("gated", "-m", meta, "--max-attempts", "1")
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    worker = Proc("run", "--config", str(config), cwd=tmp_path, env=env)
    try:
        with following(simple.url, task_id) as follower:
            for step in range(3):
                follower.line(f"step={step}")  # printed while the job waits for this file
                (tmp_path / f"seen-{step}").touch()
            follower.line("complete: todo -> done" if not broken else "the job broke")
            assert follower.finish() == code
        assert worker.finish() == 0
    finally:
        worker.reap()


def test_a_finished_task_is_printed_and_its_code_given_at_once(simple: Rail) -> None:
    done, dead = simple.add("done"), simple.add("dead")

    async def finish(tracker: Tracker) -> None:
        for _ in range(2):
            lease = await tracker.claim("w", "coder", 60_000)
            assert lease is not None
            if lease.task.id == done:
                await tracker.transition(lease, "complete")
            else:
                await tracker.fail(lease, "no", retryable=False)

    simple.run(finish)
    shown = simple.cli("task", "show", done, "--follow")
    assert shown.exit_code == 0, shown.output
    assert "complete: todo -> done" in shown.stdout and f"task {done} done" in shown.stdout
    failed = simple.cli("task", "show", dead, "--follow")
    assert failed.exit_code == 1
    assert f"task {dead} dead-lettered (permanent_failure)" in failed.stderr


def test_bad_input_is_refused_naming_it(simple: Rail) -> None:
    task_id = simple.add("t")
    unknown = simple.cli("task", "show", "no-such-task", "--follow")
    assert unknown.exit_code == 1 and "unknown task 'no-such-task'" in unknown.stderr
    alone = simple.cli("task", "show", task_id, "--poll-interval", "2s")
    assert alone.exit_code == 2 and "--poll-interval only applies with --follow" in alone.stderr
    zero = simple.cli("task", "show", task_id, "--follow", "--poll-interval", "0")
    assert zero.exit_code == 2 and "--poll-interval must be more than 0" in zero.stderr
    assert "--follow" in invoke(["task", "show", "--help"]).stdout
    assert simple.json("task", "show", task_id)["events"] == []  # nothing written


async def test_ctrl_c_stops_following_with_exit_130(simple: Rail) -> None:
    async with leased(simple.url) as (_, lease):
        with following(simple.url, lease.task.id) as follower:
            follower.proc.send_signal(signal.SIGINT)
            assert follower.finish() == 130
    assert f"interrupted; stopped following task {lease.task.id}" in follower.stderr[-1]


async def test_a_tracker_that_goes_away_mid_follow_exits_3(simple: Rail) -> None:
    with served(simple.path) as (url, server):
        async with leased(url) as (tracker, lease):
            with following(f"{url}?retry_budget_s=1", lease.task.id) as follower:
                await tracker.add_event(lease, "progress", {"step": 1})
                await line(follower, "step=1")
                server.kill()
                server.wait(timeout=LINE_S)
                assert follower.finish() == 3
    assert follower.stderr[-1].startswith("error: ") and "127.0.0.1" in follower.stderr[-1]


async def test_a_rail_without_the_extension_is_polled() -> None:
    fake = FakeNullTickets()
    tracker = RemoteTracker(
        "http://127.0.0.1:7700", retry=RetrySettings(attempts=1), transport=fake.transport()
    )
    try:
        assert "follow" not in (await tracker.capabilities()).extensions
        pid = await tracker.create_pipeline("p", PIPELINE)
        task_id = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        lease = await tracker.claim("w", "coder", 60_000)
        assert lease is not None
        early = await tracker.add_event(lease, "progress", {"step": 0})  # already shown
        with anyio.fail_after(LINE_S):
            batches = follow_events(tracker, task_id, early, poll_interval_s=0.01)
            await tracker.add_event(lease, "progress", {"step": 1})
            got = [*await anext(batches)]
            await tracker.add_event(lease, "progress", {"step": 2})
            got += await anext(batches)
            await tracker.transition(lease, "complete")
            got += [e async for batch in batches for e in batch]  # ends: the task is done
        assert [e.data for e in got if e.kind == "progress"] == [{"step": 1}, {"step": 2}]
        assert not any(r.url.path.endswith("/follow") for r in fake.requests)
    finally:
        await tracker.aclose()
