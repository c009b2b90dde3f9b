"""Parts of the worker daemon that run beside the claim loop (split out of :mod:`worker.daemon`).

* :class:`Role`, :class:`WorkerState`, :class:`WorkerStats`: the daemon's public value types.
* :class:`TrackerWatch`: the worker's one standing wait on the tracker's wake-up channel
  (``wait_for_work``). A wake-up ends the idle claim loop's wait (new work, a lapsed lease) and
  asks the lease keeper to heartbeat every in-flight lease now, because the change may be a cancel
  of one of them: a heartbeat to a cancelled task answers ``LeaseLost`` and cancels its executor.
  Those heartbeats are rate-limited (``poke_interval_s``), so a busy rail costs at most one extra
  heartbeat per lease per interval.
* :func:`maintenance_loop`: the periodic ``maintenance()`` call; :func:`instructions_for`: the
  instructions of the transition that led a claimed task to its stage.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus

from plugins.api import Executor
from tracker_client.errors import TrackerError, TrackerRejected, TrackerUnavailable, Unsupported
from tracker_client.models import Event, Lease
from tracker_client.protocol import Tracker
from worker.config import RoleConfig
from worker.run import RunResult, TaskRun
from worker.sdnotify import ProgressMonitor

__all__ = [
    "Role",
    "TrackerWatch",
    "WorkerState",
    "WorkerStats",
    "instructions_for",
    "lease_ttl_s",
    "maintenance_loop",
    "refuses_token",
    "stalled",
]

log = logging.getLogger("backlog_worker.worker")

#: Longest single wait on the wake-up channel (the served tracker's long-poll chunk).
WATCH_CHUNK_S = 25.0
#: Shortest gap between two waits after a wake-up: a channel that answers at once every time
#: (a bug, a restarting server) must not become a busy loop.
WATCH_MIN_GAP_S = 0.05
#: Pause after a failed wait before the next (the channel is a hint; the claim loop's own
#: back-off keeps the worker working meanwhile).
WATCH_ERROR_PAUSE_S = 1.0


class WorkerState(enum.Enum):
    """Lifecycle of a :class:`~worker.daemon.Worker`."""

    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Role:
    """A role this worker serves, with its executor built from the role's options."""

    config: RoleConfig
    executor: Executor

    @property
    def name(self) -> str:
        """The role name claims are made for."""
        return self.config.name


@dataclass(slots=True)
class WorkerStats:
    """Live counters, for logs, ``STATUS=`` and tests."""

    claimed: int = 0
    transitioned: int = 0
    failed: int = 0
    #: Of the failed runs, those whose task was dead-lettered by that fail.
    dead_lettered: int = 0
    #: Runs ended by the worker's shutdown and given back (no attempt spent): not failures.
    released: int = 0
    lost: int = 0
    in_flight: int = 0
    last_error: str | None = None
    by_role: dict[str, int] = field(default_factory=dict)

    def count(self, result: RunResult) -> None:
        """Count how a run ended."""
        if result.status == "transitioned":
            self.transitioned += 1
        elif result.status == "failed":
            self.failed += 1
            self.dead_lettered += result.dead_lettered
        elif result.status == "released":
            self.released += 1
        else:
            self.lost += 1
            self.last_error = f"{result.status}: {result.detail}"

    def summary(self) -> str:
        """``5 claimed, 3 transitioned, 2 failed (1 dead-lettered), 0 released, 0 lost``."""
        return (
            f"{self.claimed} claimed, {self.transitioned} transitioned, {self.failed} failed "
            f"({self.dead_lettered} dead-lettered), {self.released} released, {self.lost} lost"
        )


class TrackerWatch:
    """Waits on ``tracker.wait_for_work`` in a loop; see the module docstring."""

    def __init__(
        self,
        tracker: Tracker,
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
            while True:
                started = anyio.current_time()
                try:
                    await self._tracker.wait_for_work(WATCH_CHUNK_S)
                except TrackerError as exc:
                    log.debug("wait for work failed: %s", exc, extra={"action": "watch_failed"})
                    await anyio.sleep(WATCH_ERROR_PAUSE_S)
                    continue
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


async def maintenance_loop(tracker: Tracker, stats: WorkerStats, interval_s: float) -> None:
    """Call ``tracker.maintenance()`` every ``interval_s`` (jittered) until cancelled; returns
    when the tracker has none (a remote server reclaims expired leases itself on claim)."""
    while True:
        await anyio.sleep(interval_s * random.uniform(0.8, 1.2))
        try:
            report = await tracker.maintenance()
        except Unsupported:
            return
        except TrackerUnavailable as exc:
            stats.last_error = f"maintenance: {exc}"
            continue
        except TrackerError as exc:
            log.error("maintenance failed: %s", exc, extra={"action": "maintenance_failed"})
            continue
        if report.expired_leases or report.expired_tasks or report.crash_looped:
            log.info(
                "maintenance: %d expired lease(s), %d expired task(s), %d crash-looped",
                report.expired_leases,
                report.expired_tasks,
                report.crash_looped,
                extra={"action": "maintenance"},
            )


async def instructions_for(tracker: Tracker, lease: Lease, page_size: int) -> str | None:
    """The instructions of the transition that led the task to its stage (None for new tasks,
    or when it got there another way, e.g. a requeue)."""
    if lease.task.task_version <= 1:
        return None
    last: Event | None = None
    cursor: str | None = None
    try:
        while True:  # a task's transitions are few; pages only for very long histories
            page = await tracker.list_task_events(
                lease.task.id, limit=page_size, cursor=cursor, kind="transition"
            )
            if page.items:
                last = page.items[-1]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    except (TrackerError, NotImplementedError):
        return None
    if last is None or not isinstance(last.data, Mapping):
        return None
    if last.data.get("to") != lease.task.stage:
        return None
    value = last.data.get("instructions")
    return value if isinstance(value, str) and value else None


def refuses_token(exc: TrackerError) -> bool:
    """Whether ``exc`` is the tracker refusing the worker's api token (401/403 on a claim)."""
    return isinstance(exc, TrackerRejected) and exc.code in ("unauthorized", "forbidden")


async def _first(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def stalled(monitor: ProgressMonitor, runs: Iterable[TaskRun]) -> str | None:
    """Why a running worker looks wedged, or None. Progress is a tracker round trip that worked:
    a claim answered (with or without a task), a run finished (both ticked by the worker), a
    heartbeat accepted (read off each run's lease). None within ``monitor.stall_after_s``, or a
    claim stuck past its budget, is a problem; retries of a failing call are not progress."""
    now = time.monotonic()
    for run in runs:
        # A run's lease was last extended (or claimed) one TTL before it runs out.
        monitor.tick(at=now - run.settings.lease_ttl_s + run.lease_remaining_s())
    return monitor.problem()


def lease_ttl_s(tracker: Tracker, ttl_s: float) -> float:
    """``ttl_s`` clamped to the longest lease a heartbeat of ``tracker`` keeps (300 s on
    NullTickets)."""
    ceiling_ms = getattr(tracker, "max_lease_ttl_ms", None)
    if isinstance(ceiling_ms, int) and ceiling_ms > 0:
        return min(ttl_s, ceiling_ms / 1000)
    return ttl_s
