"""One maintenance pass's write (docs/guarantees/backlog.md): reclaim expired leases, expire
past-deadline waiting tasks, drop idempotency records past their TTL, and move on the tasks a
pipeline apply left under their version.

Every worker on an embedded or PostgreSQL rail runs one every ``[worker]
maintenance_interval_s``, so this module imports only what the hot rules already loaded, and
answers a :class:`~tracker_client.maintenance_models.MaintenanceReport` (not the operator's
answers of :mod:`tracker_client.ops_models`, whose cold models a worker never needs: issue 31).
Runs on the database thread inside a write transaction.
"""

from __future__ import annotations

from tracker_client.maintenance_models import MaintenanceReport
from tracker_client.rules.claims import expire_deadlines, reclaim_expired
from tracker_client.rules.common import Ctx
from tracker_client.rules.versions import forward_pending

__all__ = ["maintenance"]


def maintenance(ctx: Ctx) -> MaintenanceReport:
    """Reclaim expired leases, expire past-deadline tasks, purge old idempotency records."""
    expired, crash = reclaim_expired(ctx)
    tasks = expire_deadlines(ctx)
    cutoff = ctx.now - ctx.opts.idempotency_ttl_s * 1000
    purged = ctx.exec("backlog.drop_keys", (cutoff,)).rowcount
    forward_pending(ctx)  # tasks a pipeline apply left under their version (rules/versions.py)
    return MaintenanceReport(
        expired_leases=expired,
        crash_looped=crash,
        expired_tasks=tasks,
        purged_idempotency_keys=max(purged, 0),
    )
