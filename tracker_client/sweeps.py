"""What a rail's sweeps reclaimed, counted in the process that swept them (for its metrics).

Expired leases are reclaimed wherever they are found: by any claim's housekeeping (the most
common case: a dead worker's leases are swept by another worker's claim) and by maintenance
passes. The embedded and PostgreSQL rails add each committed sweep to the :class:`SweepCounts`
given when they were opened (``open_tracker(..., sweeps=...)``), so whoever exposes the
metrics (``tracker serve --metrics-listen``, a worker's ``[metrics]``) counts every one of them,
not only those of the maintenance passes it answered (docs/guarantees/edge-cases.md).

Pure: no I/O, no imports of the rails.
"""

from __future__ import annotations

__all__ = ["SweepCounts"]


class SweepCounts:
    """Running totals since this process opened the rail: leases found expired and reclaimed
    (their runs marked ``stale``) and tasks dead-lettered ``crash_loop`` by those sweeps.

    Written on the tracker's event loop after each commit that swept something; read at scrape
    time. Counters only go up (a Prometheus counter each)."""

    __slots__ = ("crash_looped", "expired_leases")

    def __init__(self) -> None:
        self.expired_leases = 0
        self.crash_looped = 0

    def add(self, expired_leases: int, crash_looped: int) -> None:
        """Count one committed sweep."""
        self.expired_leases += expired_leases
        self.crash_looped += crash_looped
