"""When a draining worker (``run --drain``) may exit, and how long it waits until it may.

"Drained" means: nothing of the worker's roles is claimable now (its last claim found nothing),
waiting for a retry (a failed, not dead-lettered task whose retry is not due yet), or running at
any worker (such a run may fail into a retry, or its worker may die and its lease lapse). So a
batch of ``--drain`` workers each exits once the whole queue of their roles is done, and a flaky
task gets its retries in batch mode. Not waited for: tasks blocked on dependencies, assigned to
other agents or held by a concurrency key, and work of other roles that may later reach a stage
of ours: those need someone else's action first.

The tracker tells through ``queue_stats`` (embedded and served rails: ``retry_waiting_count``,
``next_retry_at_ms``, ``running_count``). A plain NullTickets server does not; there the worker
waits only for the retries of its own fails (:class:`OwnRetries`, from each fail's
``next_eligible_at_ms``) and does not see other workers' runs.

It may touch the tracker's ``queue_stats`` only.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

import anyio

from tracker_client.errors import TrackerError
from tracker_client.protocol import LeaseTracker

__all__ = ["DUE_GRACE_S", "DUE_POLL_S", "DrainCheck", "OwnRetries", "drain_wait_s"]

log = logging.getLogger("backlog_worker.worker")

#: How long an own retry that is due but was not claimed back is still waited for (clock skew
#: between worker and tracker; then the task is taken to be gone: claimed elsewhere, cancelled).
DUE_GRACE_S = 2.0
#: Probe interval while an own retry is due but not claimed back (within the grace).
DUE_POLL_S = 0.2
#: Claim this long after a retry is due, so the claim does not come a millisecond early.
DUE_MARGIN_S = 0.005


class OwnRetries:
    """The retries this worker's own fails scheduled: task id -> when due (``anyio`` clock)."""

    def __init__(self) -> None:
        self._due: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._due)

    def add(self, task_id: str, retry_at_ms: int) -> None:
        """Note that ``task_id`` retries from ``retry_at_ms`` (the tracker's epoch ms, read by
        the worker's clock)."""
        wait_s = max(0.0, retry_at_ms / 1000 - time.time())
        self._due[task_id] = anyio.current_time() + wait_s + DUE_MARGIN_S

    def claimed(self, task_id: str) -> None:
        """``task_id`` was claimed (by us): its retry is no longer waited for."""
        self._due.pop(task_id, None)

    def wait_s(self) -> float | None:
        """Until the earliest own retry is due (a short poll once it is, within the grace), or
        None when none is pending."""
        now = anyio.current_time()
        for task_id, due in list(self._due.items()):
            if now > due + DUE_GRACE_S:
                del self._due[task_id]
        if not self._due:
            return None
        earliest = min(self._due.values())
        return earliest - now if earliest > now else DUE_POLL_S


async def drain_wait_s(
    tracker: LeaseTracker, roles: Sequence[str], own: OwnRetries
) -> float | None:
    """None when the roles are drained (see the module docstring); otherwise the longest wait
    before the next claim: until the earliest retry is due, or ``math.inf`` when only runs are
    in flight elsewhere (the normal idle back-off, ended early by the tracker's wake-up)."""
    try:
        stats = await tracker.queue_stats()
    except (TrackerError, NotImplementedError) as exc:
        log.debug("queue stats unavailable: %s", exc, extra={"action": "drain_stats_failed"})
        return own.wait_s()
    figures = [f for f in (stats.for_role(r) for r in roles) if f is not None]
    if any(f.retry_waiting_count is None or f.running_count is None for f in figures):
        return own.wait_s()  # a plain NullTickets server: it does not tell
    waits: list[float] = []
    if any(f.running_count for f in figures):
        waits.append(math.inf)
    for f in figures:
        if f.retry_waiting_count and f.next_retry_at_ms is not None:
            # Both times are the tracker's: no clock skew in the difference.
            waits.append(max(0.0, (f.next_retry_at_ms - stats.generated_at_ms) / 1000))
    return min(waits) + DUE_MARGIN_S if waits else None


class DrainCheck:
    """What the claim loop does after a claim round that found nothing: idle (how long at
    most), probe again now, or, draining, exit."""

    def __init__(self) -> None:
        self.own = OwnRetries()
        self._confirm = False  # the tracker said drained: one more empty round ends the drain

    def claimed(self, *task_ids: str) -> None:
        """A claim found ``task_ids``: work flows again."""
        own = self.own
        if own:  # (no own retry is waited for: nearly always)
            for task_id in task_ids:
                own.claimed(task_id)
        self._confirm = False

    def failed(self, task_id: str, retry_at_ms: int | None) -> None:
        """Our fail of ``task_id`` scheduled its retry at ``retry_at_ms`` (None: no retry)."""
        if retry_at_ms is not None:
            self.own.add(task_id, retry_at_ms)

    async def after_empty_round(
        self, tracker: LeaseTracker, roles: Sequence[str], *, drain: bool
    ) -> float | None:
        """None: drained, exit. Otherwise the longest idle wait before the next claim (0: claim
        now; ``math.inf``: the normal back-off). ``drain``: the worker drains and has no run in
        flight. Not draining, the wait is bounded by our own retries, so they are claimed as
        soon as they are due."""
        if not drain:
            own = self.own.wait_s()
            return math.inf if own is None else own
        if self._confirm:
            return None
        bound = await drain_wait_s(tracker, roles, self.own)
        # Drained by figures read after the empty claim: confirm with one more claim after them
        # (a retry may have come due in between).
        self._confirm = bound is None
        if bound is not None:
            log.debug(
                "not drained: the next claim within %.3gs", bound, extra={"action": "drain_wait"}
            )
        return 0.0 if bound is None else bound
