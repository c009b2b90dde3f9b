"""Embedded-tracker internals: threads, token storage, options, logs, claim replay, wake-ups."""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.embedded import EmbeddedTracker
from tracker_client.embedded.migrate import CACHE_KIB
from tracker_client.errors import ConfigError, InvalidTransition, LeaseLost, ValidationFailed
from tracker_client.factory import open_tracker
from tracker_client.models import ArtifactCreate, TaskCreate

pytestmark = pytest.mark.anyio

PIPE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


async def test_no_sqlite_statement_runs_on_the_event_loop_thread(tmp_path: Path) -> None:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    threads: set[int] = set()
    try:
        # The trace callback runs in the thread that executes each statement.
        tracker.engine.db.conn.set_trace_callback(lambda _sql: threads.add(threading.get_ident()))
        pid = await tracker.create_pipeline("p", PIPE)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        lease = await tracker.claim("a", "coder", 10_000)
        assert lease is not None
        await tracker.heartbeat(lease)
        await tracker.add_event(lease, "progress", {"x": 1})
        await tracker.add_artifact(ArtifactCreate(kind="log", uri="file:///x", task_id=tid))
        await tracker.transition(lease, "complete")
        await tracker.get_task(tid)
        await tracker.list_tasks()
        await tracker.queue_stats()
        await tracker.store_put("ns", "k", {"v": 1})
        await tracker.store_search("v")
        await tracker.wait(tid, timeout_s=0.05)
        await tracker.wait_for_work(0.01)
        await tracker.maintenance()
    finally:
        tracker.engine.db.conn.set_trace_callback(None)
        await tracker.aclose()
    assert threads, "no statement was traced"
    assert threading.get_ident() not in threads


async def test_only_the_token_hash_is_stored(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    tracker = await EmbeddedTracker.open(str(path))
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        lease = await tracker.claim("a", "coder", 60_000, idempotency_key="claim-1")
        assert lease is not None
        token = lease.lease_token.get_secret_value()
        assert len(token) == 64
        assert int(token, 16) >= 0
        assert token not in repr(lease)
        conn = sqlite3.connect(path)
        try:
            dump = "\n".join(conn.iterdump())
        finally:
            conn.close()
        assert token not in dump
        assert hashlib.sha256(token.encode()).hexdigest() in dump
    finally:
        await tracker.aclose()


async def test_claim_replay_returns_the_same_lease_with_the_same_token(tmp_path: Path) -> None:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(2)])
        first = await tracker.claim("a", "coder", 60_000, idempotency_key="k")
        again = await tracker.claim("a", "coder", 60_000, idempotency_key="k")
        assert first is not None
        assert again is not None
        assert (again.lease_id, again.run.id, again.task.id) == (
            first.lease_id,
            first.run.id,
            first.task.id,
        )
        # The same token (derived from the key): whichever answer arrived holds the lease.
        assert again.lease_token.get_secret_value() == first.lease_token.get_secret_value()
        await tracker.heartbeat(first)
        await tracker.transition(again, "complete")
        with pytest.raises(LeaseLost):  # replaying once the lease is finished
            await tracker.claim("a", "coder", 60_000, idempotency_key="k")
    finally:
        await tracker.aclose()


async def test_the_rail_connection_keeps_a_small_page_cache(tmp_path: Path) -> None:
    """A busy worker's page cache holds mostly pages written once: 512 KiB, not SQLite's 2 MiB
    (docs/benchmarks/memory.md), on the connection every statement runs on."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        conn = tracker.engine.db.conn
        size = await tracker.engine.db.run(lambda: conn.execute("PRAGMA cache_size").fetchone())
        assert tuple(size) == (-CACHE_KIB,)
        assert CACHE_KIB < 2000  # below SQLite's default
    finally:
        await tracker.aclose()


async def test_url_options_are_coerced_and_unknown_ones_named(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    tracker = await open_tracker(
        f"sqlite:///{db}?synchronous=full&busy_timeout_ms=250&max_backlog_depth=7"
        "&role_backlog_depth=coder=3,reviewer=2&max_stale_attempts=5&poll_interval_s=0.01"
    )
    try:
        assert isinstance(tracker, EmbeddedTracker)
        opts = tracker.options
        assert (opts.synchronous, opts.busy_timeout_ms, opts.max_backlog_depth) == ("FULL", 250, 7)
        assert opts.role_backlog_depth == {"coder": 3, "reviewer": 2}
        assert (opts.max_stale_attempts, opts.poll_interval_s) == (5, 0.01)
    finally:
        await tracker.aclose()
    with pytest.raises(ConfigError, match=r"unknown embedded tracker option.*bogus"):
        await open_tracker(f"sqlite:///{db}?bogus=1")
    with pytest.raises(ConfigError, match="busy_timeout_ms: expected an integer, got 'soon'"):
        await open_tracker(f"sqlite:///{db}?busy_timeout_ms=soon")
    with pytest.raises(ConfigError, match="synchronous: expected one of"):
        await open_tracker(f"sqlite:///{db}?synchronous=sometimes")
    with pytest.raises(ConfigError, match="role_backlog_depth"):
        await open_tracker(f"sqlite:///{db}?role_backlog_depth=coder")
    with pytest.raises(ConfigError, match="poll_interval_s: must be a positive number"):
        await EmbeddedTracker.open(str(db), poll_interval_s=0)


async def test_memory_url(tmp_path: Path) -> None:
    tracker = await open_tracker("sqlite:///:memory:")
    try:
        assert isinstance(tracker, EmbeddedTracker)
        assert tracker.path == ":memory:"
    finally:
        await tracker.aclose()


async def test_log_lines_carry_action_and_role_depth(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="backlog_worker.tracker")
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        tids = await tracker.create_tasks(
            [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(3)]
        )
        lease = await tracker.claim("a", "coder", 60_000)
        assert lease is not None
        await tracker.transition(lease, "complete")
        await tracker.cancel(tids[2])
    finally:
        await tracker.aclose()
    by_action = {r.action: r for r in caplog.records if hasattr(r, "action")}
    assert by_action["task_created"].depth == 3
    assert by_action["task_claimed"].depth == 2
    assert by_action["task_claimed"].run_id == lease.run.id
    assert by_action["task_finished"].task_id == lease.task.id
    assert by_action["task_cancelled"].depth == 1
    token = lease.lease_token.get_secret_value()
    assert all(token not in r.getMessage() for r in caplog.records)


async def test_wait_sees_another_instance_write_by_polling(tmp_path: Path) -> None:
    path = str(tmp_path / "rail.db")
    one = await EmbeddedTracker.open(path, poll_interval_s=0.01)
    two = await EmbeddedTracker.open(path, poll_interval_s=0.01)
    try:
        pid = await one.create_pipeline("p", PIPE)
        tid = await one.create_task(TaskCreate(pipeline_id=pid, title="t"))
        result = None

        async def waiter(task_status: anyio.abc.TaskStatus[None]) -> None:
            nonlocal result
            task_status.started()
            result = await one.wait(tid, timeout_s=20)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                await tg.start(waiter)
                lease = await two.claim("a", "coder", 60_000)
                assert lease is not None
                await two.transition(lease, "complete")
        assert result is not None
        assert result.finished
        assert result.outcome == "done"
    finally:
        await one.aclose()
        await two.aclose()


async def test_wait_for_work_wakes_on_a_write_in_this_process(tmp_path: Path) -> None:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"), poll_interval_s=5)
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        woke = anyio.Event()

        async def idle(task_status: anyio.abc.TaskStatus[None]) -> None:
            task_status.started()
            await tracker.wait_for_work(30)
            woke.set()

        with anyio.fail_after(10):  # far below both the 30 s timeout and the 5 s poll
            async with anyio.create_task_group() as tg:
                await tg.start(idle)
                await anyio.sleep(0)
                await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
                await woke.wait()
    finally:
        await tracker.aclose()


def test_works_on_trio_too(tmp_path: Path) -> None:
    pytest.importorskip("trio", minversion="0.26")  # anyio 4 needs a recent trio

    async def main() -> str:
        tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
        try:
            pid = await tracker.create_pipeline("p", PIPE)
            await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
            lease = await tracker.claim("a", "coder", 60_000)
            assert lease is not None
            return (await tracker.transition(lease, "complete")).new_stage
        finally:
            await tracker.aclose()

    assert anyio.run(main, backend="trio") == "done"


async def test_out_of_range_arguments_are_validation_errors(tmp_path: Path) -> None:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        with pytest.raises(ValidationFailed) as info:
            await tracker.list_tasks(cursor=f"{10**30}:{tid}")
        assert info.value.code == "invalid_cursor"
        with pytest.raises(ValidationFailed) as info:
            await tracker.list_task_events(tid, cursor=str(10**30))
        assert info.value.code == "invalid_cursor"
        with pytest.raises(ValidationFailed, match="size_bytes"):
            await tracker.add_artifact(
                ArtifactCreate(kind="log", uri="file:///x", task_id=tid, size_bytes=2**70)
            )
        with pytest.raises(ValidationFailed, match="invalid argument"):
            await tracker.list_tasks(stage=["not", "a", "string"])  # type: ignore[arg-type]
    finally:
        await tracker.aclose()


async def _until(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(20):
        while not predicate():
            await anyio.sleep(0.001)


async def test_concurrent_writes_share_a_commit_and_fail_alone(tmp_path: Path) -> None:
    """Writes queued together commit together; one that fails is rolled back alone."""
    path = tmp_path / "rail.db"
    tracker = await EmbeddedTracker.open(str(path))
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        outcomes: dict[int, object] = {}

        async def create(i: int) -> None:
            title = "x" * 5000 if i == 3 else f"t{i}"  # #3 breaks the title limit
            try:
                outcomes[i] = await tracker.create_task(TaskCreate(pipeline_id=pid, title=title))
            except ValidationFailed as exc:
                outcomes[i] = exc

        entered, gate = threading.Event(), threading.Event()

        def hold() -> None:
            entered.set()
            gate.wait(30)

        commits = tracker.engine.db._commits
        async with anyio.create_task_group() as tg:
            # hold the database thread so that all twelve writes queue up behind it
            tg.start_soon(tracker.engine.db.run, hold)
            await _until(entered.is_set)
            for i in range(12):
                tg.start_soon(create, i)
            await _until(lambda: tracker.engine.db._worker._queue.qsize() == 12)
            gate.set()
        assert tracker.engine.db._commits == commits + 1  # one group commit for all eleven
        assert isinstance(outcomes.pop(3), ValidationFailed)
        assert all(isinstance(v, str) for v in outcomes.values())
        listed = await tracker.list_tasks(limit=100)
        assert sorted(t.id for t in listed.items) == sorted(str(v) for v in outcomes.values())
    finally:
        await tracker.aclose()
    conn = sqlite3.connect(path)  # and it is all on disk
    try:
        assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 11
    finally:
        conn.close()


async def test_a_write_that_fails_after_writing_is_undone_and_the_group_replayed(
    tmp_path: Path,
) -> None:
    """A job that wrote before failing: rolled back alone, its group-mates still commit."""
    from tracker_client.rules import store

    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        runs: dict[str, int] = {}

        def put(key: str, fail: bool) -> Callable[[Any], None]:
            def fn(c: Any) -> None:
                runs[key] = runs.get(key, 0) + 1
                store.put(c, "ns", key, {"k": key})
                if fail:
                    raise ValidationFailed(f"{key} refused after its write")

            return fn

        outcomes: dict[str, object] = {}

        async def write(key: str, fail: bool) -> None:
            try:
                outcomes[key] = await tracker._write("store_put", put(key, fail))
            except ValidationFailed as exc:
                outcomes[key] = exc

        entered, gate = threading.Event(), threading.Event()

        def hold() -> None:
            entered.set()
            gate.wait(30)

        async with anyio.create_task_group() as tg:
            tg.start_soon(tracker.engine.db.run, hold)
            await _until(entered.is_set)
            for key, fail in (("a", False), ("b", True), ("c", False)):
                tg.start_soon(write, key, fail)
            await _until(lambda: tracker.engine.db._worker._queue.qsize() == 3)
            gate.set()
        assert isinstance(outcomes["b"], ValidationFailed)
        assert outcomes["a"] is None and outcomes["c"] is None
        assert runs == {"a": 2, "b": 2, "c": 1}  # the group up to "b", then each job alone
        assert sorted(e.key for e in await tracker.store_list("ns")) == ["a", "c"]
    finally:
        await tracker.aclose()


async def test_blocking_hand_off_used_off_asyncio(tmp_path: Path) -> None:
    """The path taken on event loops other than asyncio: a helper thread waits for the job."""
    from tracker_client.embedded.dbthread import Job as _Job

    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        db = tracker.engine.db
        answer = await anyio.to_thread.run_sync(db._blocking_call, _Job(lambda: 41 + 1))
        assert answer == 42

        def boom() -> None:
            raise ValueError("from the database thread")

        with pytest.raises(ValueError, match="from the database thread"):
            await anyio.to_thread.run_sync(db._blocking_call, _Job(boom))
    finally:
        await tracker.aclose()


def test_run_and_lease_ids_are_canonical_uuid4() -> None:
    """The hand-rolled UUID text equals ``uuid.UUID(bytes=..., version=4)``'s."""
    import os
    import uuid

    from tracker_client.rules.claims import _uuid4, fresh_ids

    for _ in range(200):
        raw = os.urandom(16)
        assert _uuid4(raw) == str(uuid.UUID(bytes=raw, version=4))
    run_id, lease_id, token = fresh_ids()
    assert uuid.UUID(run_id).version == uuid.UUID(lease_id).version == 4
    assert len(token) == 64 and int(token, 16) >= 0


def test_claimed_run_ids_are_in_creation_order() -> None:
    """A claim's run id leads with the claim's time (ids append to the runs b-tree), still a
    canonical UUIDv4 text, unique within one millisecond."""
    import uuid

    from tracker_client.rules.claims import fresh_ids

    now = 1_767_000_000_000
    same_ms = {fresh_ids(now)[0] for _ in range(1000)}
    assert len(same_ms) == 1000
    for run_id in same_ms:
        parsed = uuid.UUID(run_id)
        assert str(parsed) == run_id and parsed.version == 4
        assert parsed.int >> 80 == now
    later = [fresh_ids(now + step)[0] for step in (1, 2, 1000, 86_400_000)]
    assert max(same_ms) < later[0] and later == sorted(later)


def test_ids_made_for_a_batch_are_as_made_one_by_one() -> None:
    """A claim's batch makes its ids together (one urandom call): each run id still leads
    with the claim's time, every id is a canonical UUIDv4 text, every token 32 random bytes
    in hex, none repeated."""
    import uuid

    from tracker_client.rules.claims import _uuid4, fresh_ids_many
    from tracker_client.rules.common import uuid4_hex

    for _ in range(200):
        raw = os.urandom(16)
        assert uuid4_hex(raw.hex()) == _uuid4(raw)
    now = 1_767_000_000_000
    made = fresh_ids_many(now, 500)
    assert len(made) == 500
    runs, leases, tokens = (set(column) for column in zip(*made, strict=True))
    assert len(runs) == len(leases) == len(tokens) == 500
    for run_id, lease_id, token in made:
        for text in (run_id, lease_id):
            parsed = uuid.UUID(text)
            assert str(parsed) == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert uuid.UUID(run_id).int >> 80 == now
        assert len(token) == 64 and int(token, 16) >= 0
    assert fresh_ids_many(now, 0) == []


def test_new_ids_lead_with_the_time() -> None:
    """Task (and pipeline, artifact) ids lead with the wall-clock ms (ids made together append to
    the b-trees keyed by them), still canonical UUIDv4 text, unique within one millisecond."""
    import time
    import uuid

    from tracker_client.rules.common import new_id

    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == 1000
    for task_id in ids:
        parsed = uuid.UUID(task_id)
        assert str(parsed) == task_id and parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert before <= parsed.int >> 80 <= after


async def test_a_finish_many_refusing_nothing_reads_no_lease_row(
    tmp_path: Path, rail_logs_warnings_only: None
) -> None:
    """A batch of plain transitions of leases this process handed out, nothing refuses, is
    checked against the leases as handed out and written under one savepoint: no read of a
    lease's row (one per item before; the batch's moves check the rows as they write); one
    refused item still leaves the others written once and itself nothing (the batch written
    again item by item)."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    statements: list[str] = []
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        for i in range(6):
            await tracker.create_task(TaskCreate(pipeline_id=pid, title=f"t{i}"))
        leases = await tracker.claim_many("a", "coder", 60_000, 6)
        assert len(leases) == 6
        done = {"trigger": "complete"}
        tracker.engine.db.conn.set_trace_callback(statements.append)
        first = await tracker.finish_many(
            [FinishItem(lease=x, transition=done) for x in leases[:3]]
        )
        assert all(isinstance(o, FinishResult) for o in first)
        assert not [s for s in statements if s.startswith("SELECT") and "lease_token" in s]
        assert sum(s.startswith("SAVEPOINT") for s in statements) == 1
        assert not [s for s in statements if s.startswith("ROLLBACK")]
        statements.clear()
        second = await tracker.finish_many(
            [
                FinishItem(lease=leases[3], transition=done),
                FinishItem(lease=leases[4], transition={"trigger": "nope"}),
                FinishItem(lease=leases[5], transition=done),
            ]
        )
        tracker.engine.db.conn.set_trace_callback(None)
        stages = [(await tracker.get_task(x.task.id)).stage for x in leases[3:]]
        kinds = [
            [e.kind for e in (await tracker.list_task_events(x.task.id)).items] for x in leases
        ]
    finally:
        tracker.engine.db.conn.set_trace_callback(None)
        await tracker.aclose()
    assert isinstance(second[0], FinishResult) and isinstance(second[2], FinishResult)
    assert isinstance(second[1], InvalidTransition)
    # the batch's savepoint rolled back at the refusal, then one savepoint per item
    assert sum(s.startswith("ROLLBACK TO SAVEPOINT finish_batch") for s in statements) == 1
    assert sum(s.startswith("SAVEPOINT finish_item") for s in statements) == 3
    assert stages == ["done", "todo", "done"]
    assert [k.count("transition") for k in kinds] == [1, 1, 1, 1, 0, 1]
