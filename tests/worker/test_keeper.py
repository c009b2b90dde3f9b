"""The LeaseKeeper on its own: one task scheduling heartbeats and flushes for many runs.

The runs here are small recorders (the keeper's whole contract with a run is the ``Kept``
protocol); the keeper end to end with real leases is covered by the daemon tests.
"""

from __future__ import annotations

import anyio
import pytest

from worker.keeper import LeaseKeeper

pytestmark = pytest.mark.anyio


class Recorder:
    def __init__(self, heartbeat_s: float = 0.01, flush_s: float = 0.01) -> None:
        self.heartbeat_interval_s = heartbeat_s
        self.flush_interval_s = flush_s
        self.pending = False
        self.beats = 0
        self.flushes = 0
        self.keep_beating = True
        self.block = anyio.Event()  # set to let a blocking heartbeat return
        self.blocking = False
        self.in_beat = anyio.Event()
        self.beat_cancelled = False

    def has_pending_reports(self) -> bool:
        return self.pending

    async def heartbeat_once(self) -> bool:
        self.beats += 1
        self.in_beat.set()
        if self.blocking:
            try:
                await self.block.wait()
            except anyio.get_cancelled_exc_class():
                self.beat_cancelled = True
                raise
        return self.keep_beating

    async def flush_once(self) -> bool:
        self.flushes += 1
        self.pending = False
        return True


async def until(predicate: object, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not predicate():  # type: ignore[operator]
            await anyio.sleep(0.002)


async def test_heartbeats_every_interval_and_flushes_only_pending_reports() -> None:
    keeper = LeaseKeeper()
    fast, slow = Recorder(0.01), Recorder(60)
    async with anyio.create_task_group() as tg:
        await tg.start(keeper.run)
        keeper.add(fast)
        keeper.add(slow)
        await until(lambda: fast.beats >= 3)
        assert slow.beats == 0  # its interval is a minute
        assert fast.flushes == 0  # nothing buffered: no flush call at all
        fast.pending = True
        await until(lambda: fast.flushes == 1)
        assert not fast.pending
        tg.cancel_scope.cancel()


async def test_a_run_added_while_the_keeper_sleeps_long_wakes_it() -> None:
    keeper = LeaseKeeper()
    async with anyio.create_task_group() as tg:
        await tg.start(keeper.run)
        keeper.add(Recorder(3600, 3600))  # the keeper now sleeps for an hour
        await anyio.sleep(0)
        quick = Recorder(0.01)
        keeper.add(quick)
        await until(lambda: quick.beats >= 1)
        tg.cancel_scope.cancel()


async def test_removing_a_run_stops_and_cancels_its_heartbeat() -> None:
    keeper = LeaseKeeper()
    run = Recorder(0.01)
    run.blocking = True
    async with anyio.create_task_group() as tg:
        await tg.start(keeper.run)
        keeper.add(run)
        await run.in_beat.wait()
        await anyio.sleep(0.05)  # several intervals pass while the heartbeat hangs...
        assert run.beats == 1  # ...and no second heartbeat starts beside it
        keeper.remove(run)
        await until(lambda: run.beat_cancelled)
        assert not keeper.keeps(run)
        tg.cancel_scope.cancel()


async def test_a_lost_lease_stops_the_heartbeats() -> None:
    keeper = LeaseKeeper()
    run = Recorder(0.005)
    run.keep_beating = False  # heartbeat_once says the lease is gone
    async with anyio.create_task_group() as tg:
        await tg.start(keeper.run)
        keeper.add(run)
        await until(lambda: not keeper.keeps(run))
        beats = run.beats
        await anyio.sleep(0.05)
        assert run.beats == beats == 1
        tg.cancel_scope.cancel()


async def test_a_poke_during_a_heartbeat_in_flight_sends_another_after_it() -> None:
    """The tracker signalled a change (maybe a cancel) while a run's heartbeat was already on
    its way: that heartbeat may have been answered before the change, so the run gets one
    more as soon as it returns, not a whole interval later."""
    keeper = LeaseKeeper()
    run = Recorder(3600, 3600)  # no heartbeat of its own for an hour
    async with anyio.create_task_group() as tg:
        await tg.start(keeper.run)
        keeper.add(run)
        run.blocking = True
        keeper.poke()
        await run.in_beat.wait()  # the first poke's heartbeat is in flight...
        keeper.poke()  # ...then came a change
        await anyio.sleep(0)
        assert run.beats == 1  # never two heartbeats of one run at once
        run.blocking = False
        run.block.set()
        await until(lambda: run.beats == 2, timeout=5)
        tg.cancel_scope.cancel()
