"""The answers of a rail's maintenance pass and of a purge of finished tasks.

Split from :mod:`tracker_client.ops_models` (which names them too) because every worker on an
embedded or PostgreSQL rail builds a :class:`MaintenanceReport` every ``[worker]
maintenance_interval_s`` (5 s by default), and with its default retention a pass purges
(:class:`PurgeResult`): the operator's other answers import the cold models of a task's detail
and events (:mod:`tracker_client.cold_models`), which a worker that only runs maintenance never
needs (issue 31: 0.2-0.3 MiB of a busy worker's peak, ``python -m bench.memory``).
"""

from tracker_client.models import _Model

__all__ = ["MaintenanceReport", "PurgeResult"]


class PurgeResult(_Model):
    """What a purge of finished tasks did (or, ``dry_run``, would do): rows per table."""

    __module__ = "tracker_client.ops_models"

    tasks: int = 0
    runs: int = 0
    events: int = 0
    artifacts: int = 0
    idempotency_keys: int = 0
    #: Database pages given back to the file system (0 without incremental auto-vacuum).
    pages_freed: int = 0
    #: Tasks last updated before this time (epoch ms) were purged.
    cutoff_ms: int = 0
    dry_run: bool = False


class MaintenanceReport(_Model):
    """What one maintenance pass did."""

    __module__ = "tracker_client.ops_models"

    expired_leases: int = 0
    crash_looped: int = 0
    #: Waiting tasks dead-lettered ``expired`` (their dependents, dead-lettered
    #: ``upstream_dead_lettered`` in the same pass, are not counted).
    expired_tasks: int = 0
    purged_idempotency_keys: int = 0
    #: Finished tasks purged by retention in this pass (the embedded option ``retention_days``).
    purged_tasks: int = 0
    #: Tasks created by schedule ticks in this pass (extension ``schedules``).
    scheduled_tasks: int = 0
