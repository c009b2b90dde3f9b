"""Dedupe keys (extension ``dedupe``): a create carrying ``dedupe_key`` while a task with the
same key is waiting or running answers that task's id (no error, nothing created); with
``dedupe_window_ms`` the key keeps deduping that long after the task finished.

Also: bulk creates (within the batch and against stored tasks), bad keys/windows refused naming
the field, and 8 OS processes submitting the same key at once on one rail file -> one task.
Runs on every tracker of the contract suite; the process test is embedded-only (real files); a
plain NullTickets server (the fake of tests/remote) gets ``Unsupported`` naming the option.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.contract.support import FakeClock, all_tasks, claim, make_pipeline, new_task
from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tests.startline import reap, release_together
from tracker_client.errors import Unsupported, ValidationFailed
from tracker_client.factory import open_tracker
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_a_waiting_or_running_key_answers_the_existing_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    (first,) = await tracker.create_tasks([new_task(pid, "a", dedupe_key="nightly")])
    (again,) = await tracker.create_tasks([new_task(pid, "b", dedupe_key="nightly")])
    assert again == first
    lease = await claim(tracker)  # running now
    assert lease.task.id == first and lease.task.dedupe_key == "nightly"
    (running,) = await tracker.create_tasks([new_task(pid, "c", dedupe_key="nightly")])
    assert running == first
    (other,) = await tracker.create_tasks([new_task(pid, "d", dedupe_key="weekly")])
    assert other != first
    assert len(await all_tasks(tracker)) == 2
    await tracker.transition(lease, "complete")
    (after,) = await tracker.create_tasks([new_task(pid, "e", dedupe_key="nightly")])
    assert after not in (first, other)  # finished, no window: a new task
    assert len(await all_tasks(tracker)) == 3


async def test_the_window_keeps_deduping_after_the_task_finished(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    (first,) = await tracker.create_tasks(
        [new_task(pid, "a", dedupe_key="k", dedupe_window_ms=60_000)]
    )
    await tracker.transition(await claim(tracker), "complete")
    clock.advance(59_999)
    (inside,) = await tracker.create_tasks([new_task(pid, "b", dedupe_key="k")])
    assert inside == first
    clock.advance(1)
    (outside,) = await tracker.create_tasks([new_task(pid, "c", dedupe_key="k")])
    assert outside != first


async def test_bulk_dedupes_within_the_batch_and_against_stored_tasks(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    (stored,) = await tracker.create_tasks([new_task(pid, "s", dedupe_key="x")])
    ids = await tracker.create_tasks(
        [
            new_task(pid, "1", dedupe_key="x"),
            new_task(pid, "2", dedupe_key="y"),
            new_task(pid, "3"),
            new_task(pid, "4", dedupe_key="y"),
        ]
    )
    assert ids[0] == stored and ids[3] == ids[1]
    assert len(set(ids)) == 3
    assert len(await all_tasks(tracker)) == 3


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"dedupe_key": ""}, "dedupe_key must be a non-empty string"),
        ({"dedupe_key": "k" * 1025}, "dedupe_key must be a non-empty string"),
        ({"dedupe_window_ms": 5}, "dedupe_window_ms needs a dedupe_key"),
        ({"dedupe_key": "k", "dedupe_window_ms": -1}, "dedupe_window_ms must not be negative"),
        (
            {"dedupe_key": "k", "dedupe_window_ms": 10**15},
            "dedupe_window_ms is more than ten years ahead",
        ),
    ],
)
async def test_bad_keys_and_windows_are_refused_naming_the_field_and_write_nothing(
    tracker: Tracker, fields: dict[str, object], named: str
) -> None:
    pid = await make_pipeline(tracker)
    with pytest.raises(ValidationFailed, match=named):
        await tracker.create_tasks([new_task(pid, "ok"), new_task(pid, "bad", **fields)])
    assert await all_tasks(tracker) == []


_SUBMITTER = """
import sys, anyio
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

async def main(url, pid):
    tracker = await open_tracker(url)
    try:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        ids = [await tracker.create_task(TaskCreate(pipeline_id=pid, title="t", dedupe_key="one"))
               for _ in range(5)]
        print(" ".join(ids), flush=True)
    finally:
        await tracker.aclose()

anyio.run(main, sys.argv[1], sys.argv[2])
"""


def _submit_together(url: str, pid: str, n: int) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SUBMITTER, url, pid],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    try:
        release_together(procs)  # every child has opened the rail before any submits
        out = []
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=50)
            assert proc.returncode == 0, stderr
            out.extend(stdout.split())
        return out
    finally:
        reap(procs)


@pytest.mark.slow
async def test_eight_processes_submitting_one_key_make_one_task(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rail.db'}"
    tracker = await open_tracker(url)
    try:
        pid = await make_pipeline(tracker)
        ids = await anyio.to_thread.run_sync(_submit_together, url, pid, 8)
        assert len(ids) == 40 and len(set(ids)) == 1
        assert [t.id for t in await all_tasks(tracker)] == ids[:1]
    finally:
        await tracker.aclose()


async def test_eight_concurrent_submitters_on_one_tracker_make_one_task(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    ids: list[str] = []

    async def submit() -> None:
        ids.append(await tracker.create_task(new_task(pid, "t", dedupe_key="same")))

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(submit)
    assert len(ids) == 8 and len(set(ids)) == 1
    assert [t.id for t in await all_tasks(tracker)] == ids[:1]


@pytest.mark.parametrize(
    "fields",
    [
        {"delay_ms": 1_000},
        {"run_at_ms": 1_000},
        {"dedupe_key": "k"},
        {"dedupe_key": "k", "dedupe_window_ms": 5},
    ],
)
async def test_a_plain_nulltickets_server_gets_unsupported_naming_the_option(
    fields: dict[str, object],
) -> None:
    fake = FakeNullTickets(api_token="admin-token")
    remote = RemoteTracker(
        "http://127.0.0.1:7700", api_token="admin-token", transport=fake.transport()
    )
    try:
        pid = await remote.create_pipeline("p", PIPELINE)
        with pytest.raises(Unsupported, match=next(iter(fields))):
            await remote.create_task(new_task(pid, "t", **fields))
        with pytest.raises(Unsupported, match=next(iter(fields))):
            await remote.create_tasks([new_task(pid, "ok"), new_task(pid, "t", **fields)])
        assert (await remote.list_tasks()).items == []
    finally:
        await remote.aclose()
