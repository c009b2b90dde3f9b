"""Whether the worker makes progress: the watchdog's probe (:class:`ProgressMonitor`).

Kept apart from :mod:`worker.sdnotify` (which only sends what it is told): the daemon ticks
the monitor and wraps its tracker calls in it; the watchdog calls it. No I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

__all__ = ["ProgressMonitor"]


@dataclass
class ProgressMonitor:
    """A ready-made watchdog probe: "the loop ticked recently and no call is stuck".

    The daemon calls :meth:`tick` whenever it demonstrably made progress (a claim answered, a
    heartbeat answered, a run's report that landed: not a run lost to a hung tracker,
    docs/guarantees/stalled-tracker.md) and wraps tracker calls in
    :meth:`call` with their time budget. The monitor itself is the probe: calling it returns
    False when the last tick is older than ``stall_after_s`` or a tracked call has run past its
    budget. ``stall_after_s`` must exceed the longest legitimate quiet period (the idle
    back-off ceiling, the heartbeat interval).
    """

    stall_after_s: float
    clock: Callable[[], float] = time.monotonic
    _last_tick: float = field(init=False)
    _calls: dict[int, tuple[str, float]] = field(init=False, default_factory=dict)
    _next_id: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        """Start the clock: a fresh monitor counts as having just made progress."""
        self._last_tick = self.clock()

    def tick(self, at: float | None = None) -> None:
        """Record progress now (or at ``at``, a time of ``clock`` already past; an older time
        than the last tick changes nothing)."""
        when = self.clock() if at is None else at
        self._last_tick = max(self._last_tick, when)

    def call(self, name: str, budget_s: float) -> AbstractContextManager[None]:
        """Track a call (e.g. a tracker request) that must finish within ``budget_s``: a
        context manager around it (a plain object, not a generator's: one per claim)."""
        return _Call(self, name, budget_s)

    def problem(self) -> str | None:
        """Why the probe fails right now, or None when everything is progressing."""
        now = self.clock()
        for name, deadline in self._calls.values():
            if now > deadline:
                return f"{name} stuck for {now - deadline:.1f}s past its budget"
        idle = now - self._last_tick
        if idle > self.stall_after_s:
            return f"no progress for {idle:.1f}s (limit {self.stall_after_s:g}s)"
        return None

    def __call__(self) -> bool:
        """The probe: True while progressing."""
        return self.problem() is None


class _Call:
    """One call :meth:`ProgressMonitor.call` tracks, while its ``with`` block runs."""

    __slots__ = ("_budget_s", "_id", "_monitor", "_name")

    def __init__(self, monitor: ProgressMonitor, name: str, budget_s: float) -> None:
        self._monitor, self._name, self._budget_s, self._id = monitor, name, budget_s, 0

    def __enter__(self) -> None:
        monitor = self._monitor
        self._id = call_id = monitor._next_id
        monitor._next_id = call_id + 1
        monitor._calls[call_id] = (self._name, monitor.clock() + self._budget_s)

    def __exit__(self, *exc: object) -> None:
        del self._monitor._calls[self._id]
