"""Embedded-only promises that a black-box client can't see: secrets at rest, logs, busy files."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from pathlib import Path

import pytest

from tests.contract.support import FakeClock, claim, make_pipeline, new_task
from tracker_client.errors import LeaseLost, TrackerUnavailable
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy

pytestmark = pytest.mark.anyio

ACTIONS = {
    "task_created",
    "task_claimed",
    "task_finished",
    "lease_expired",
    "task_cancelled",
    "task_dead_lettered",
}


async def test_lease_token_is_stored_only_as_a_hash(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}", clock=FakeClock())
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_task(new_task(pid))
        lease = await claim(tracker, idempotency_key="k-claim")
        replayed = await claim(tracker, idempotency_key="k-claim")
        await tracker.add_event(replayed, "progress", {"pct": 1}, idempotency_key="k-event")
        with sqlite3.connect(db) as raw:
            dump = "\n".join(raw.iterdump())
        raw.close()
        assert lease.lease_id in dump  # the dump does hold the lease
        tokens = {lease.lease_token.get_secret_value(), replayed.lease_token.get_secret_value()}
        for token in tokens:
            assert token not in dump
            assert token.upper() not in dump
    finally:
        await tracker.aclose()


async def test_writes_are_logged_with_action_and_depth_never_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    caplog.set_level(logging.INFO, logger="backlog_worker.tracker")
    tracker = await open_tracker(f"sqlite:///{tmp_path}/rail.db", clock=clock)
    try:
        pid = await make_pipeline(tracker)
        fatal = RetryPolicy(max_attempts=0)
        await tracker.create_tasks(
            [new_task(pid, "a"), new_task(pid, "b", retry_policy=fatal), new_task(pid, "c")]
        )
        leases = [await claim(tracker, ttl_ms=1_000)]
        await tracker.transition(leases[0], "complete")  # a: finished
        leases.append(await claim(tracker, ttl_ms=1_000))
        await tracker.fail(leases[1], "fatal")  # b: dead-lettered
        leases.append(await claim(tracker, ttl_ms=1_000))
        clock.advance(1_001)
        await tracker.maintenance()  # c: lease expired
        await tracker.cancel(leases[2].task.id)  # c: cancelled
    finally:
        await tracker.aclose()

    records = [r for r in caplog.records if r.name == "backlog_worker.tracker"]
    seen = {getattr(r, "action", None) for r in records}
    assert seen >= ACTIONS, f"missing actions: {ACTIONS - seen}"
    for record in records:
        action = getattr(record, "action", None)
        if action in ACTIONS:
            assert getattr(record, "task_id", None), f"{action} without task_id"
            assert isinstance(getattr(record, "depth", None), int), f"{action} without depth"
            assert hasattr(record, "run_id"), f"{action} without run_id"
    tokens = [lease.lease_token.get_secret_value() for lease in leases]
    for record in records:
        text = record.getMessage() + repr(vars(record))
        for token in tokens:
            assert token not in text, f"lease token in log record {record.getMessage()!r}"


def _rail_keys(db: Path) -> list[str]:
    """The rail's lease-token keys (hex) as stored."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as raw:
        rows = raw.execute("SELECT value FROM rail_secrets").fetchall()
    raw.close()
    return [str(r[0]) for r in rows]


async def test_the_rail_key_is_made_once_kept_across_opens_and_never_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
        assert _rail_keys(db) == []  # made on the first keyed claim, not before
        await claim(tracker)  # no key: a random token, no rail key needed
        assert _rail_keys(db) == []
        first = await claim(tracker, idempotency_key="k-once")
    finally:
        await tracker.aclose()
    keys = _rail_keys(db)
    assert len(keys) == 1 and len(keys[0]) == 64
    tracker = await open_tracker(f"sqlite:///{db}")
    try:  # reopened: the replay derives with the stored key, the same token
        again = await claim(tracker, idempotency_key="k-once")
        assert again.lease_token.get_secret_value() == first.lease_token.get_secret_value()
        await tracker.heartbeat(first)
    finally:
        await tracker.aclose()
    assert _rail_keys(db) == keys
    secret = keys[0]
    for record in caplog.records:
        text = record.getMessage() + repr(vars(record))
        assert secret not in text and secret.upper() not in text, record.getMessage()
        assert bytes.fromhex(secret).hex() not in text


async def test_a_lease_claimed_before_tokens_were_derived_gets_the_derived_token(
    tmp_path: Path,
) -> None:
    # A rail upgraded while a keyed claim's lease was out: its stored hash is of a random
    # token. The replay answers the derived token (and the old answer's token stops working,
    # as every replay did before); it never hands out a token that does not hold the lease.
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_task(new_task(pid))
        lease = await claim(tracker, idempotency_key="k-old")
        legacy = hashlib.sha256(b"a random token of an older build").hexdigest()
        with sqlite3.connect(db) as raw:
            raw.execute("UPDATE tasks SET lease_token_sha256 = ?", (legacy,))
        raw.close()
        with pytest.raises(LeaseLost):
            await tracker.heartbeat(lease)  # what the older build's replay did to it
        again = await claim(tracker, idempotency_key="k-old")
        assert again.lease_token.get_secret_value() == lease.lease_token.get_secret_value()
        await tracker.heartbeat(again)
        await tracker.transition(again, "complete")
    finally:
        await tracker.aclose()


async def test_locked_database_is_unavailable(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}", busy_timeout_ms=100)
    try:
        pid = await make_pipeline(tracker)
        holder = sqlite3.connect(db, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            with pytest.raises(TrackerUnavailable):
                await tracker.create_task(new_task(pid))
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        await tracker.create_task(new_task(pid))  # and it recovers once the lock is gone
        assert (await tracker.list_tasks()).items[0].title == "task"
    finally:
        await tracker.aclose()
