"""One task per worker that heartbeats every in-flight lease and flushes buffered reports.

A run used to host its own heartbeat and flush loops: two more tasks and a task group per
claimed task, most of a short task's cost in the worker. The keeper holds one schedule per
(kind, interval) instead: a dict used as an ordered queue (insertion order = due order, since
every entry is due ``interval`` after it was (re)scheduled), so adding, removing and finding the
next due run are all O(1). When a run is due the keeper starts that one call in its own task
group, so a slow heartbeat of one run never delays another's; a call still in flight is not
started twice. The keeper decides *when* only: whether a heartbeat is sent and what its answer
does is decided in one place, :meth:`LeaseSession.heartbeat <worker.lease.LeaseSession.heartbeat>`.

It touches nothing but the runs it keeps (:class:`Kept`: each run's ``heartbeat_once`` and
``flush_once``) and anyio's clock (read as :func:`worker.lease.clock.loop_time` reads it); what
those calls write is the run's :class:`~worker.lease.LeaseSession`'s.
"""

from __future__ import annotations

import math
from typing import Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from worker.lease.clock import loop_clock, loop_time

__all__ = ["Kept", "LeaseKeeper"]


class Kept(Protocol):
    """What the keeper needs of a run (:class:`worker.run.TaskRun` implements it)."""

    @property
    def heartbeat_interval_s(self) -> float:
        """Seconds between heartbeats."""

    @property
    def flush_interval_s(self) -> float:
        """Seconds between flushes of buffered reports."""

    def has_pending_reports(self) -> bool:
        """Whether a flush would write anything."""

    async def heartbeat_once(self) -> bool:
        """Extend the lease; False once the lease is gone (stop heartbeating)."""

    async def flush_once(self) -> bool:
        """Write buffered reports; False to stop flushing this run."""


_HEARTBEAT = "heartbeat"
_FLUSH = "flush"


class LeaseKeeper:
    """Schedules heartbeats and report flushes of many runs from one task (see module doc)."""

    def __init__(self) -> None:
        self._queues: dict[tuple[str, float], dict[Kept, float]] = {}
        self._calls: dict[tuple[str, Kept], anyio.CancelScope] = {}
        #: Runs poked while their heartbeat was in flight: one more heartbeat when it returns.
        self._again: set[Kept] = set()
        self._wake = anyio.Event()
        self._sleep_until = math.inf
        self._tick = math.inf  # the shortest interval seen: how long an idle keeper sleeps
        self._now = loop_time  # the running loop's clock, bound once the keeper runs

    def keeps(self, run: Kept) -> bool:
        """Whether ``run`` is scheduled for heartbeats."""
        return any(run in q for (kind, _), q in self._queues.items() if kind == _HEARTBEAT)

    def add(self, run: Kept) -> None:
        """Start keeping ``run``: its first heartbeat and flush are one interval from now."""
        now = self._now()
        self._schedule(_HEARTBEAT, run.heartbeat_interval_s, run, now)
        self._schedule(_FLUSH, run.flush_interval_s, run, now)

    def remove(self, run: Kept) -> None:
        """Stop keeping ``run``; a heartbeat of it still in flight is cancelled."""
        for queue in self._queues.values():
            queue.pop(run, None)
        if self._calls:  # (most runs end with no call of theirs in flight, nor one to repeat)
            self._again.discard(run)
            scope = self._calls.get((_HEARTBEAT, run))
            if scope is not None:
                scope.cancel()

    def poke(self) -> None:
        """Heartbeat every kept run now instead of at its turn (the tracker signalled a change
        that may be a cancel: a heartbeat is how a run learns its lease was revoked). A run
        whose heartbeat is in flight is not sent a second one beside it, but one more right
        after it returns (it may have been answered before the change); each run's next turn
        is one interval after this heartbeat, so poking adds no heartbeats of its own later."""
        now = anyio.current_time()
        for (kind, _), queue in self._queues.items():
            if kind == _HEARTBEAT:
                for run in queue:
                    queue[run] = now
                    if (_HEARTBEAT, run) in self._calls:
                        self._again.add(run)
        self._wake.set()

    def _schedule(self, kind: str, interval: float, run: Kept, now: float) -> None:
        due = now + interval
        queue = self._queues.get((kind, interval))
        if queue is None:
            queue = self._queues[(kind, interval)] = {}
            self._tick = min(self._tick, interval)
        queue[run] = due
        if due < self._sleep_until:
            self._wake.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep runs until cancelled."""
        self._now = loop_clock()
        async with anyio.create_task_group() as tg:
            task_status.started()
            while True:
                now = anyio.current_time()
                self._sleep_until = self._fire_due(tg, now)
                self._wake = anyio.Event()
                with anyio.move_on_after(self._sleep_until - now):
                    await self._wake.wait()

    def _fire_due(self, tg: TaskGroup, now: float) -> float:
        """Start every due call; returns when the next one is due."""
        next_due = math.inf
        for (kind, interval), queue in self._queues.items():
            while queue:
                run = next(iter(queue))
                due = queue[run]
                if due > now:
                    next_due = min(next_due, due)
                    break
                del queue[run]
                queue[run] = now + interval  # back of the queue: due after everyone else
                if (kind, run) in self._calls:
                    continue  # the previous call is still running
                if kind == _FLUSH and not run.has_pending_reports():
                    continue
                tg.start_soon(self._call, kind, run)
        # With nothing due, still wake a tick from now rather than sleep until woken: runs
        # added meanwhile are then due after that and need no wake-up of their own (short
        # tasks come and go far faster than any interval).
        return min(next_due, now + self._tick)

    async def _call(self, kind: str, run: Kept) -> None:
        with anyio.CancelScope() as scope:
            self._calls[(kind, run)] = scope
            try:
                keep = await (run.heartbeat_once() if kind == _HEARTBEAT else run.flush_once())
            finally:
                del self._calls[(kind, run)]
            key = (kind, run.heartbeat_interval_s if kind == _HEARTBEAT else run.flush_interval_s)
            queue = self._queues.get(key)
            if not keep:
                self._again.discard(run)
                if queue is not None:
                    queue.pop(run, None)
            elif kind == _HEARTBEAT and run in self._again:
                self._again.discard(run)
                if queue is not None and run in queue:
                    # due now, at the front (the queue's order is its due order)
                    del queue[run]
                    self._queues[key] = {run: anyio.current_time(), **queue}
                    self._wake.set()
