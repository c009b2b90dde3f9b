"""The worker's chores beside the claim loop: maintenance, a claimed task's instructions.

* :func:`maintenance_loop`: the periodic ``maintenance()`` call (returns when the tracker has
  none: a remote server reclaims expired leases itself on claim);
* :func:`instructions_for`: the instructions of the transition that led a claimed task to its
  stage;
* :func:`refuses_token`: whether a claim's error is the tracker refusing the worker's token;
* :func:`send_claim`: one claim request, ``claim`` or ``claim_many``.

They may touch the tracker (reads, claims and ``maintenance``) and the worker's counters.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping

import anyio

from tracker_client.errors import TrackerError, TrackerRejected, TrackerUnavailable, Unsupported
from tracker_client.models import Event, Lease
from tracker_client.protocol import ClaimsMany, LeaseTracker
from worker.daemon.values import WorkerStats

__all__ = ["instructions_for", "maintenance_loop", "refuses_token", "send_claim"]

log = logging.getLogger("backlog_worker.worker")


async def maintenance_loop(tracker: LeaseTracker, stats: WorkerStats, interval_s: float) -> None:
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


async def instructions_for(tracker: LeaseTracker, lease: Lease, page_size: int) -> str | None:
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


async def send_claim(
    tracker: LeaseTracker,
    many: ClaimsMany | None,
    agent: str,
    role: str,
    ttl_ms: int,
    n: int,
    key: str | None,
) -> list[Lease]:
    """Up to ``n`` leases for ``role`` in one request: ``claim``, or ``many``'s ``claim_many``
    for more than one (the claimer asks for several only where the rail declares it)."""
    if n > 1 and many is not None:
        return await many.claim_many(agent, role, ttl_ms, n, idempotency_key=key)
    lease = await tracker.claim(agent, role, ttl_ms, idempotency_key=key)
    return [] if lease is None else [lease]
