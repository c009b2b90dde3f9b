"""What an idle round of parked claims writes (:mod:`tracker_client.rules.parked`), and the work
that still reaches a parked claim: over the embedded rail on a real SQLite file.

An idle worker's round used to be two empty claims, each recorded under its key: the park's
last look at its deadline, and the next park's first claim (docs/benchmarks/costs.md).
A quiet deadline now answers without the last look, and on the SQLite rail an attempt that
leases nothing records nothing: the round commits nothing."""

from __future__ import annotations

import gc
import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from tests.contract.support import make_pipeline, new_task
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import Lease

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _claim_records(rail: EmbeddedTracker) -> int:
    """The ``claim_many`` answers recorded under idempotency keys (another connection)."""
    with sqlite3.connect(rail.path) as conn:
        row = conn.execute("SELECT count(*) FROM idempotency WHERE operation = 'claim_many'")
        return int(row.fetchone()[0])


class _Commits:
    """Whether another connection committed since: SQLite's ``data_version`` on a connection
    of the test's own moves on every other connection's commit."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path)
        self._start = self._version()

    def _version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def any(self) -> bool:
        """Whether a commit came since this was made."""
        moved = self._version() != self._start
        self._conn.close()
        return moved


async def _park(rail: EmbeddedTracker, wait_ms: int, key: str | None = None) -> list[Lease]:
    return await rail.parked_claim(
        "w1", "coder", 60_000, 1, wait_ms, idempotency_key=key or str(uuid.uuid4())
    )


async def test_an_idle_round_commits_nothing(rail: EmbeddedTracker) -> None:
    await make_pipeline(rail)
    commits = _Commits(rail.path)
    for _ in range(3):  # three idle rounds: each park looks, waits, and answers empty
        assert await _park(rail, 150) == []
    assert _claim_records(rail) == 0
    assert not commits.any()


async def test_a_quiet_deadline_sends_no_last_look(rail: EmbeddedTracker) -> None:
    """On a rail that records an empty attempt (as PostgreSQL's claim does), a park that
    nothing woke records its first look only: no second claim at its deadline."""
    rail._parked_empty_recorded = True
    await make_pipeline(rail)
    assert await _park(rail, 200) == []
    assert _claim_records(rail) == 1


async def test_a_lapsing_lease_wakes_the_parked_claim_which_leases_it(
    rail: EmbeddedTracker,
) -> None:
    pid = await make_pipeline(rail)
    task_id = await rail.create_task(new_task(pid, "dropped"))
    gone = await rail.claim("gone", "coder", 300)  # its worker dies: never heartbeated
    assert gone is not None and gone.task.id == task_id
    with anyio.fail_after(15):  # answered when the lease lapses, far before the 30 s wait
        [lease] = await _park(rail, 30_000)
    assert lease.task.id == task_id and lease.run.id != gone.run.id


async def test_a_delayed_task_is_leased_by_the_next_parks_first_look(
    rail: EmbeddedTracker,
) -> None:
    """A task that time alone makes claimable while a park waits: the park answers at its
    deadline without a last look, and the caller's next park (an idle worker parks again at
    once) leases it with its first look, not after its wait."""
    pid = await make_pipeline(rail)
    task_id = await rail.create_task(new_task(pid, "later", delay_ms=100))
    assert await _park(rail, 300) == []
    with anyio.fail_after(15):  # not the 30 s wait
        [lease] = await _park(rail, 30_000)
    assert lease.task.id == task_id


async def test_a_retry_replays_the_attempt_that_leased_after_empty_ones(
    rail: EmbeddedTracker, tmp_path: Path
) -> None:
    """Empty attempts leave their key free, so the attempt that leased is recorded under the
    first key: a retry answered by a restarted rail (which only has the record) replays it."""
    pid = await make_pipeline(rail)
    key = str(uuid.uuid4())
    got: list[Lease] = []

    async def parked() -> None:
        got.extend(await _park(rail, 30_000, key))

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(parked)
            await anyio.sleep(0.1)  # not readiness: let it look (empty) and wait first
            task_id = await rail.create_task(new_task(pid, "came"))
    [lease] = got
    assert lease.task.id == task_id
    assert _claim_records(rail) == 1
    again = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        [replayed] = await again.parked_claim("w1", "coder", 60_000, 1, 0, idempotency_key=key)
    finally:
        await again.aclose()
    assert (replayed.lease_id, replayed.lease_token) == (lease.lease_id, lease.lease_token)


async def _exceptions_left_in_cycles(rounds: Callable[[], Awaitable[object]]) -> list[str]:
    """The exceptions the cyclic collector finds after ``rounds`` (gc off meanwhile)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        await rounds()
        gc.collect()
        return [type(o).__name__ for o in gc.garbage if isinstance(o, BaseException)]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


async def test_parked_waits_leave_no_exception_in_a_reference_cycle(
    rail: EmbeddedTracker,
) -> None:
    """A wait ended by a ride's landing, by its deadline, or by its caller's cancel leaves no
    CancelledError held in a cycle with its frames (anyio keeps a cancelled task's so):
    refcounting frees them at once, not a busy worker's late gen-0 collection."""
    pid = await make_pipeline(rail)

    async def rounds() -> None:
        for _ in range(3):
            got: list[Lease] = []

            async def parked(got: list[Lease] = got) -> None:
                got.extend(await _park(rail, 30_000))

            async with anyio.create_task_group() as tg:  # a pickup: the create's ride lands
                tg.start_soon(parked)
                await anyio.sleep(0.02)  # not readiness: parked by now, or it claims at once
                await rail.create_task(new_task(pid, "x"))
            await rail.transition(got[0], "complete")
            assert await _park(rail, 30) == []  # an idle round, to its deadline
            with anyio.move_on_after(0.03):  # a caller cancelled (a stopping worker)
                await _park(rail, 30_000)

    with anyio.fail_after(20):
        assert await _exceptions_left_in_cycles(rounds) == []
