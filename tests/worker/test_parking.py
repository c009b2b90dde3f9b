"""The idle worker's parked claim (worker/daemon/parking.py), over the rail's own
``parked_claim`` (the embedded rail has the method; the served tracker serves it)."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from tracker_client.protocol import Tracker
from worker.daemon.parking import park_claim
from worker.daemon.running import InFlight
from worker.daemon.watch import TrackerWatch
from worker.daemon.worker import Worker

from .conftest import add_tasks, role, start_worker, wait_until, worker_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_an_idle_delay_past_the_longest_wait_still_parks(
    tracker: Tracker, pipeline_id: str
) -> None:
    """An ``idle_max_s`` over 60 s asks the tracker for its longest wait (not a refusal)."""
    [task_id] = await add_tasks(tracker, pipeline_id, 1)
    with anyio.fail_after(10):
        leases = await park_claim(
            tracker, anyio.CancelScope(), "w", "coder", 30_000, 1, 120.0, str(uuid.uuid4())
        )
    assert [x.task.id for x in leases] == [task_id]


async def test_a_stop_ends_the_parked_claim_at_once(tracker: Tracker, pipeline_id: str) -> None:
    stop = anyio.CancelScope()
    got: list[object] = ["not answered"]

    async def park() -> None:
        got[:] = await park_claim(tracker, stop, "w", "coder", 30_000, 1, 30.0, None)

    with anyio.fail_after(5):  # not the 30 s wait
        async with anyio.create_task_group() as tg:
            tg.start_soon(park)
            await anyio.sleep(0.05)  # parked by now, or not yet: either way it ends
            stop.cancel()
    assert got == []
    [task_id] = await add_tasks(tracker, pipeline_id, 1)  # after the stop: nobody holds it
    lease = await tracker.claim("other", "coder", 30_000)
    assert lease is not None and lease.task.id == task_id


async def test_a_stopped_worker_sends_no_parked_claim(tracker: Tracker, pipeline_id: str) -> None:
    await add_tasks(tracker, pipeline_id, 1)
    stop = anyio.CancelScope()
    stop.cancel()
    assert await park_claim(tracker, stop, "w", "coder", 30_000, 1, 5.0, None) == []
    assert await tracker.claim("other", "coder", 30_000) is not None


async def test_the_watch_stands_down_while_a_parked_claim_waits(
    tracker: Tracker, pipeline_id: str
) -> None:
    """While quiet, a submit wakes no long poll of the watch (the parked claim takes it); after,
    the watch polls again from its last mark, so a change made meanwhile wakes it at once."""
    watch = TrackerWatch(tracker, poke=lambda: None)
    async with anyio.create_task_group() as tg:
        await tg.start(watch.run)
        await add_tasks(tracker, pipeline_id, 1)
        await wait_until(lambda: watch.wakeups == 1)  # polling, with a mark from now on
        with watch.quiet():
            await add_tasks(tracker, pipeline_id, 1)
            await anyio.sleep(0.2)  # not readiness: time for a wake-up that must not come
            assert watch.wakeups == 1
        await wait_until(lambda: watch.wakeups == 2)
        with watch.quiet(enabled=False):  # a run in flight: the watch keeps polling
            await add_tasks(tracker, pipeline_id, 1)
            await wait_until(lambda: watch.wakeups == 3)
        tg.cancel_scope.cancel()


async def test_the_first_stop_cancels_a_parked_wait_inside_the_shield() -> None:
    """A parked claim's wait runs inside its claim's shield: the first (graceful) stop must
    still end it (the tracker gives back what it leased), while a plain claim's request stays
    shielded until a second stop abandons it."""
    in_flight = InFlight(2)
    claim = in_flight.open_claim()
    with claim.scope, claim.shield():
        parked = claim.parked()
        in_flight.stop_claims(immediate=False)
        with parked:
            await anyio.sleep(5)  # cancelled on entry: the stop came first
        assert parked.cancelled_caught
        await anyio.lowlevel.checkpoint()  # the shield holds off the claim's own cancel
    assert claim.scope.cancel_called

    other = in_flight.open_claim()
    with other.scope, other.shield():
        waiting = other.parked()
        with waiting:
            in_flight.stop_claims(immediate=True)
            await anyio.sleep(5)
        assert waiting.cancelled_caught


async def test_a_parked_wait_begun_after_the_stop_ends_at_once() -> None:
    """A stop that came before the parked wait's scope was made (the claim's scope cancelled,
    its shield holding) still ends the wait as soon as it starts: nothing parks on after it."""
    in_flight = InFlight(1)
    claim = in_flight.open_claim()
    with claim.scope, claim.shield():
        in_flight.stop_claims(immediate=False)
        parked = claim.parked()
        with anyio.fail_after(5), parked:
            await anyio.sleep(5)
        assert parked.cancelled_caught


class QuietParks:
    """The embedded rail, its parked claims declared quiet (long parks, as on PostgreSQL),
    each park's role recorded."""

    quiet_parks = True

    def __init__(self, inner: Tracker) -> None:
        self._inner = inner
        self.roles: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def parked_claim(self, *args: Any, **kwargs: Any) -> Any:
        self.roles.append(args[1])
        return await self._inner.parked_claim(*args, **kwargs)


async def test_new_roles_end_a_long_park_at_once(tracker: Tracker, pipeline_id: str) -> None:
    """A quiet park waits up to QUIET_PARK_S (here half the watchdog's quiet period, 10 s):
    a reload of the roles ends it, and the next park claims for the new ones."""
    rail = QuietParks(tracker)
    worker = Worker(rail, worker_config(drain=False), [role("coder", lambda ctx: anyio.sleep(0))])  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: rail.roles == ["coder"])
        with anyio.fail_after(5):  # not the 5-10 s park
            worker.set_roles([role("reviewer", lambda ctx: anyio.sleep(0))])
            await wait_until(lambda: rail.roles == ["coder", "reviewer"])
        worker.stop()
