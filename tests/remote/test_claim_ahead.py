"""Claiming ahead on the served rail (``tracker_client/nulltickets/ahead.py``), against a real
``tracker serve`` process.

While a client's reports and claims alternate, its ``finish_many`` also claims (the riding
claim of extension ``finish_claim``) a batch ahead, kept in the client; the next ``claim_many``
is answered from those leases without a request. A kept lease is a real lease (heartbeat and
report work under its token); an unused one is withdrawn (extension ``withdraw``: no run left,
the attempt count unchanged) when the client closes, when it waits too long, when reports come
with no claim between them, or when another agent is asked for; a replayed key is answered as
the first call was; a lost answer strands nothing; a worker killed with leases kept loses no
task and finishes none twice.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from pydantic import SecretStr

from tests.faultproxy import FaultProxy, Hang
from tests.remote.test_finish_claim import Counted
from tests.worker.daemonkit import clean_env, leased, python_config, serve_tracker
from tracker_client.capabilities import LeaseHandle
from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.errors import Conflict, TrackerUnavailable, ValidationFailed
from tracker_client.models import Lease, TaskCreate
from tracker_client.nulltickets.client import RemoteTracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parents[2]
TTL = 30_000


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with serve_tracker(tmp_path, token=None) as (url, db):
        yield url, db


@pytest.fixture
async def counted(served: tuple[str, Path]) -> AsyncIterator[tuple[RemoteTracker, Counted]]:
    transport = Counted()
    tracker = RemoteTracker(served[0], timeout_s=5, transport=transport)
    try:
        yield tracker, transport
    finally:
        await tracker.aclose()


#: A counted client with 12 tasks on the rail, in a worker's rhythm: (client, rail file, the
#: tasks of the leases it keeps).
Rhythm = tuple[RemoteTracker, Path, set[str]]


@pytest.fixture
async def rhythm(served: tuple[str, Path], counted: tuple[RemoteTracker, Counted]) -> Rhythm:
    _, db = served
    tracker, _ = counted
    await _add(tracker, 12)
    return tracker, db, await _in_rhythm(tracker, db)


async def _add(tracker: RemoteTracker, n: int) -> list[str]:
    [pid] = [p.id for p in await tracker.list_pipelines() if p.name == "flow"]
    return await tracker.create_tasks(
        [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(n)]
    )


def _items(leases: list[Lease], prefix: str) -> list[FinishItem]:
    return [
        FinishItem(
            lease=LeaseHandle(
                lease_id=lease.lease_id,
                run_id=lease.run.id,
                lease_token=SecretStr(lease.lease_token.get_secret_value()),
            ),
            transition={"trigger": "complete"},
            idempotency_key=f"{prefix}{i}",
        )
        for i, lease in enumerate(leases)
    ]


def _runs(db: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall()
    return {str(status): int(n) for status, n in rows}


def _leased_ids(db: Path) -> set[str]:
    now_ms = int(time.time() * 1000)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT id FROM tasks WHERE lease_expires_at_ms > ?", (now_ms,))
        return {str(row[0]) for row in rows}


async def _in_rhythm(tracker: RemoteTracker, db: Path) -> set[str]:
    """A client draining by threes: a claim, its reports, a claim, and the reports of that
    one, which claim ahead (two batches: the last claim found none kept). The kept task ids."""
    first = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k0")
    await tracker.finish_many(_items(first, "a"))  # the first report: no rhythm yet
    assert _leased_ids(db) == set()
    second = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k1")
    done = await tracker.finish_many(_items(second, "b"))
    assert all(isinstance(o, FinishResult) for o in done)
    return _leased_ids(db)


async def test_a_busy_clients_reports_claim_ahead_and_its_next_claim_sends_nothing(
    served: tuple[str, Path], counted: tuple[RemoteTracker, Counted]
) -> None:
    _, db = served
    tracker, transport = counted
    await _add(tracker, 12)
    transport.paths.clear()
    kept = await _in_rhythm(tracker, db)
    assert len(kept) == 6
    # two claims (the first went alone, the second with nothing to ride) and two reports:
    # the claim ahead rode in the second report, nothing else was sent for it
    assert transport.paths.count("/runs/finish-many") == 2
    assert tracker.ahead.book.sent_n == 1
    transport.paths.clear()
    nxt = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k2")
    assert transport.paths == []  # answered from the kept leases
    assert {x.task.id for x in nxt} < kept
    # real leases: a heartbeat and the reports under their tokens work
    await tracker.heartbeat(nxt[0])
    done = await tracker.finish_many(_items(nxt, "c"))
    assert all(isinstance(o, FinishResult) for o in done)
    # those reports claimed the next batch ahead, and the rest kept go to the next claim
    last = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k3")
    assert {x.task.id for x in last} == kept - {x.task.id for x in nxt}


async def test_a_replay_answers_the_same_leases_and_other_arguments_conflict(
    rhythm: Rhythm,
) -> None:
    tracker, _, _ = rhythm
    first = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k2")
    again = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k2")
    assert [(x.run.id, x.lease_token.get_secret_value()) for x in again] == [
        (x.run.id, x.lease_token.get_secret_value()) for x in first
    ]
    with pytest.raises(Conflict, match="k2"):
        await tracker.claim_many("w1", "coder", TTL, 2, idempotency_key="k2")
    # once reported, a replay answers the leases still running: none
    await tracker.finish_many(_items(first, "c"))
    assert await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k2") == []


async def test_closing_the_client_withdraws_the_kept_leases_without_a_trace(
    served: tuple[str, Path],
) -> None:
    """A lease no claim took is withdrawn at the server: no run of it stays, and the task's
    next run is its first attempt (an executor never sees attempt 2 of a task whose attempt
    1 never ran)."""
    url, db = served
    tracker = RemoteTracker(url, timeout_s=5)
    try:
        await _add(tracker, 12)
        kept = await _in_rhythm(tracker, db)
    finally:
        await tracker.aclose()
    assert len(kept) == 6 and _leased_ids(db) == set()
    other = RemoteTracker(url, timeout_s=5)
    try:
        for task_id in kept:
            detail = await other.get_task(task_id)
            assert detail.latest_run is None and detail.dead_letter_reason is None
        again = await other.claim_many("w2", "coder", TTL, 6)  # claimable at once, by anyone
        assert {x.task.id for x in again} == kept
        assert {x.run.attempt for x in again} == {1}
    finally:
        await other.aclose()


async def test_a_kept_lease_that_waits_too_long_is_withdrawn_and_work_claimed_fresh(
    rhythm: Rhythm,
) -> None:
    tracker, db, _ = rhythm
    tracker.ahead.book.max_age_s = 0.0  # every kept lease is now too old
    nxt = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k2")
    assert len(nxt) == 3
    for lease in nxt:  # the withdrawn tasks, claimed again as first attempts
        runs = await tracker.list_runs(lease.task.id)
        assert [(r.status, r.attempt) for r in runs] == [("running", 1)]
    assert _leased_ids(db) == {x.task.id for x in nxt}
    assert "released" not in _runs(db)


async def test_a_kept_lease_that_moved_on_is_left_as_it_is(rhythm: Rhythm) -> None:
    """A lease that is no longer as claimed (a cancel came first) is not withdrawn: the
    server refuses the lease, writing nothing, and the client goes on."""
    tracker, _, kept = rhythm
    victim = sorted(kept)[0]
    await tracker.cancel(victim)
    tracker.ahead.book.max_age_s = 0.0
    await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k2")
    runs = await tracker.list_runs(victim)
    assert [r.status for r in runs] == ["cancelled"]


async def test_reports_with_no_claim_between_them_give_back_what_is_kept(
    rhythm: Rhythm,
) -> None:
    tracker, db, _ = rhythm
    running = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k2")
    # the worker stops claiming: its runs report one by one, no claim in between
    for i, lease in enumerate(running):
        await tracker.finish_many(_items([lease], f"s{i}-"))
    assert _leased_ids(db) == set()
    assert "released" not in _runs(db)  # the three still kept, withdrawn without a trace


async def test_another_agent_stops_claiming_ahead_and_gets_the_kept_work(
    served: tuple[str, Path], counted: tuple[RemoteTracker, Counted]
) -> None:
    _, db = served
    tracker, _ = counted
    await _add(tracker, 9)
    kept = await _in_rhythm(tracker, db)
    got = await tracker.claim_many("w2", "coder", TTL, 6, idempotency_key="b1")
    assert {x.task.id for x in got} == kept  # withdrawn, then claimed afresh
    assert got[0].run.agent_id == "w2"
    await tracker.finish_many(_items(got, "g"))
    assert _leased_ids(db) == set()  # never again through this client


async def test_a_claim_with_bad_arguments_is_refused_by_the_server_not_answered_from_kept(
    rhythm: Rhythm,
) -> None:
    tracker, db, kept = rhythm
    with pytest.raises(ValidationFailed, match="n must be"):
        await tracker.claim_many("w1", "coder", TTL, 0, idempotency_key="bad")
    assert _leased_ids(db) == kept


async def test_a_lost_answer_is_replayed_by_the_next_claim_and_strands_nothing(
    served: tuple[str, Path],
) -> None:
    url, db = served
    proxy = FaultProxy(int(url.rsplit(":", 1)[1]))
    with proxy.start():
        tracker = RemoteTracker(proxy.url, timeout_s=1)
        try:
            await _add(tracker, 15)
            first = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k0")
            await tracker.finish_many(_items(first, "a"))
            second = await tracker.claim_many("w1", "coder", TTL, 3, idempotency_key="k1")
            proxy.set_hangs([Hang("finish-many HTTP", rate=1.0, hang_s=None, landed=True)])
            with pytest.raises(TrackerUnavailable):
                await tracker.finish_many(_items(second, "b"))
            proxy.set_hangs([])
            stranded = _leased_ids(db) - {x.task.id for x in second}
            assert len(stranded) == 6  # the claim ahead was written, its answer lost
            # the reports' retry under their keys writes nothing twice
            again = await tracker.finish_many(_items(second, "b"))
            assert all(isinstance(o, FinishResult) for o in again)
            # the next claim takes the lost claim's leases (replayed under its key)
            nxt = await tracker.claim_many("w1", "coder", TTL, 6, idempotency_key="k2")
            assert {x.task.id for x in nxt} == stranded
        finally:
            await tracker.aclose()
    assert _runs(db).get("stale", 0) == 0


@pytest.mark.timeout(180)
async def test_workers_claiming_ahead_drain_every_task_once_despite_a_sigkill(
    tmp_path: Path,
) -> None:
    """Two worker processes drain 400 no-op tasks through ``tracker serve``; one is killed
    while it has leases running and kept. What it held lapses with the TTL and is claimed
    again; no task is lost and none is finished twice."""
    tasks = 400
    (tmp_path / "jobs.py").write_text("async def noop(ctx):\n    return None\n")
    with serve_tracker(tmp_path, token=None) as (url, db):
        admin = RemoteTracker(url, timeout_s=5)
        try:
            pid = await admin.create_pipeline(
                "p",
                {
                    "initial": "todo",
                    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
                    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
                },
            )
            await admin.create_tasks(
                [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(tasks)]
            )
        finally:
            await admin.aclose()
        config = python_config(
            tmp_path, url, "jobs:noop", "drain = true", "lease_ttl_s = 2", concurrency=10
        )
        env = clean_env(PYTHONPATH=f"{tmp_path}:{ROOT}")
        cmd = [sys.executable, "-m", "worker", "run", "--config", str(config)]
        victim = subprocess.Popen(
            [*cmd, "--agent-id", "victim"], env=env, cwd=tmp_path, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 60
            while _runs(db).get("completed", 0) < 60:
                assert time.monotonic() < deadline, "the victim never got going"
                await anyio.sleep(0.005)
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
        finally:
            if victim.poll() is None:
                victim.kill()
                victim.wait(10)
        held = leased(db)
        rest = await anyio.run_process(
            [*cmd, "--agent-id", "rest"], env=env, cwd=tmp_path, check=False
        )
        assert rest.returncode == 0, rest.stderr.decode()[-2000:]
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        stages = dict(conn.execute("SELECT stage, count(*) FROM tasks GROUP BY stage").fetchall())
        twice = conn.execute(
            "SELECT task_id FROM runs WHERE status = 'completed' "
            "GROUP BY task_id HAVING count(*) <> 1"
        ).fetchall()
    assert stages == {"done": tasks}
    assert twice == [], "a task finished twice"
    statuses = _runs(db)
    assert statuses["completed"] == tasks
    # what the victim held (a batch running, some reporting, a batch or two kept) lapsed
    assert set(statuses) <= {"completed", "stale", "released"}
    assert statuses.get("stale", 0) == held <= 40
