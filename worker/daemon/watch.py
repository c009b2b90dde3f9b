"""The worker's one standing wait on the tracker's wake-up channel (``wait_for_work``).

A wake-up ends the idle claim loop's wait (new work, a lapsed lease) and asks the lease keeper
to heartbeat every in-flight lease now, because the change may be a cancel of one of them: a
heartbeat to a cancelled task answers ``LeaseLost`` and cancels its executor. Those heartbeats
are rate-limited (``poke_interval_s``), so a busy rail costs at most one extra heartbeat per
lease per interval.

Each wait passes back the change mark the previous one answered (``since``): a change that
lands while the watch pauses between two waits (:meth:`TrackerWatch._pause`) ends the next wait
at once instead of going unseen until the claim loop's idle back-off (a burst of submits).

While the claim loop's probe is a parked claim (:mod:`worker.daemon.parking`) and no run is
in flight, the watch stands down (:meth:`TrackerWatch.quiet`): the parked claim is the wait,
and a second long poll answered by the same submit would only cost the pickup (in the
interleaved pickup bench, samples whose wake-up answer raced the parked claim's read 8.2 ms at
the median, the others 6.5 ms). It polls again, from its last change mark, when the park ends.

It may touch the tracker's ``wait_for_work`` only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import anyio
from anyio.abc import TaskStatus

from tracker_client.errors import TrackerError
from tracker_client.protocol import LeaseTracker

__all__ = ["TrackerWatch"]

log = logging.getLogger("backlog_worker.worker")


#: Longest single wait on the wake-up channel (the served tracker's long-poll chunk).
WATCH_CHUNK_S = 25.0
#: Shortest gap between two waits after a wake-up: a channel that answers at once every time
#: (a bug, a restarting server) must not become a busy loop.
WATCH_MIN_GAP_S = 0.05
#: Pause after a failed wait before the next (the channel is a hint; the claim loop's own
#: back-off keeps the worker working meanwhile).
WATCH_ERROR_PAUSE_S = 1.0


class TrackerWatch:
    """Waits on ``tracker.wait_for_work`` in a loop; see the module docstring."""

    def __init__(
        self,
        tracker: LeaseTracker,
        *,
        poke: Callable[[], None],
        poke_interval_s: float = 0.5,
    ) -> None:
        self._tracker = tracker
        self._poke = poke
        self._poke_interval_s = poke_interval_s
        self._changed = anyio.Event()
        self._poke_wanted = anyio.Event()
        self._idle_waiters = 0
        self._waiter_came = anyio.Event()
        self.wakeups = 0
        self.pokes = 0
        self._quiet = 0
        self._loud = anyio.Event()
        self._poll: anyio.CancelScope | None = None  # the long poll in flight, if any

    @contextlib.contextmanager
    def quiet(self, enabled: bool = True) -> Iterator[None]:
        """While in this block (``enabled``), no long poll is in flight: one in flight is
        cancelled, the next waits for the block's end (see the module docstring)."""
        if not enabled:
            yield
            return
        self._quiet += 1
        if self._poll is not None:
            self._poll.cancel()
        try:
            yield
        finally:
            self._quiet -= 1
            if not self._quiet:
                self._loud.set()

    def forget(self) -> None:
        """Forget earlier wake-ups: called as a claim round begins, so only a change after that
        (which the round may not have seen) ends the next idle wait early."""
        if self._changed.is_set():
            self._changed = anyio.Event()

    async def wait(self, timeout_s: float, *, also: anyio.Event | None = None) -> None:
        """Until the tracker signals a change (since the last :meth:`forget`), ``also`` is set,
        or ``timeout_s``."""
        self._idle_waiters += 1
        self._waiter_came.set()
        try:
            with anyio.move_on_after(timeout_s):
                if also is None:
                    await self._changed.wait()
                    return
                async with anyio.create_task_group() as tg:
                    for event in (self._changed, also):
                        tg.start_soon(_first, event, tg.cancel_scope)
        finally:
            self._idle_waiters -= 1

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._poke_loop)
            task_status.started()
            mark: str | None = None  # the last wait's change mark: a change since wakes at once
            while True:
                while self._quiet:
                    self._loud = anyio.Event()
                    await self._loud.wait()
                started = anyio.current_time()
                try:
                    with anyio.CancelScope() as poll:
                        self._poll = poll
                        got = await self._tracker.wait_for_work(WATCH_CHUNK_S, since=mark)
                except TrackerError as exc:
                    log.debug("wait for work failed: %s", exc, extra={"action": "watch_failed"})
                    await anyio.sleep(WATCH_ERROR_PAUSE_S)
                    continue
                finally:
                    self._poll = None
                if poll.cancelled_caught:
                    continue  # stood down for a parked claim: poll again when it ends
                mark = got
                elapsed = anyio.current_time() - started
                if elapsed < WATCH_CHUNK_S * 0.98:  # woken, not timed out
                    self.wakeups += 1
                    self._changed.set()
                    self._poke_wanted.set()
                    await self._pause(elapsed)

    async def _pause(self, elapsed: float) -> None:
        """The gap before the next wait. With an idle claim loop waiting, a short one (new work
        must not wait). Without one only the pokes need wake-ups, and they are rate-limited: so
        on a busy rail (a change every few ms) a busy worker re-waits once per poke interval,
        not after every change; an idle wait beginning meanwhile ends the pause, and is woken
        at once, since a change during the pause went unseen (costing one claim at most)."""
        if self._idle_waiters:
            await anyio.sleep(max(0.0, WATCH_MIN_GAP_S - elapsed))
            return
        came = self._waiter_came = anyio.Event()
        with anyio.move_on_after(self._poke_interval_s):
            await came.wait()
            self._changed.set()

    async def _poke_loop(self) -> None:
        while True:
            await self._poke_wanted.wait()
            self._poke_wanted = anyio.Event()
            self.pokes += 1
            self._poke()
            await anyio.sleep(self._poke_interval_s)


async def _first(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
