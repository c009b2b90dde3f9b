"""The ``run`` command's tuning of the cyclic garbage collector (``[worker] gc_tuning``).

The collector's state (its thresholds, its frozen objects) is the whole process's, so only the
process that ``backlog-worker run`` owns changes it: :class:`~worker.daemon.Worker` never does,
and an application that embeds a ``Worker`` keeps its own collector settings
(see ``docs/operate/worker-config.md``).

While the worker runs:

* what start-up built (modules, configuration, models: nearly all of the heap) is frozen, set
  aside from the collector (:func:`gc.freeze`), so the collections that a busy worker's
  short-lived objects trigger no longer walk it (~6 % of the loop thread's instructions per
  no-op run, measured with callgrind over a 2,000-task drain);
* the youngest generation is collected after :data:`BUSY_GC_GEN0` net allocations instead of
  700: ten runs in flight hold more than 700 objects at their peak, so each claim's batch set off
  a collection (~70 us, finding next to nothing: the runs' objects die by reference count);
  cyclic garbage still goes, a little later. Same-run A/B, 20,000 tasks: 4,371 -> 4,667 tasks/s.

Both are undone when the worker stops. Then, as the process exits (:func:`freeze_for_exit`), the
heap is frozen again: the interpreter's own shutdown collections would otherwise walk every
object once more just before the process is gone (~40 ms of a ~275 ms empty-rail ``run``,
docs/benchmarks.md); exit handlers still run, streams are still flushed and modules finalized.

``[worker] gc_tuning = false`` (or ``BACKLOG_WORKER_WORKER__GC_TUNING=false``) leaves the
collector as Python set it, at exit too.
"""

from __future__ import annotations

import gc

__all__ = ["BUSY_GC_GEN0", "BusyGc", "freeze_for_exit"]

#: The youngest generation's threshold while a ``run`` worker runs (Python's default is 700).
BUSY_GC_GEN0 = 20_000


class BusyGc:
    """Tunes the collector for a busy worker once it runs (:meth:`apply`), undone by
    :meth:`restore`; both do nothing when ``enabled`` is false, and each does its work once."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._saved: tuple[int, ...] | None = None

    def apply(self) -> None:
        """Freeze the heap built so far and raise the youngest generation's threshold (called
        when the worker is running: start-up's objects exist, no run's yet)."""
        if not self._enabled or self._saved is not None:
            return
        self._saved = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(max(self._saved[0], BUSY_GC_GEN0), *self._saved[1:])

    def restore(self) -> None:
        """Give the collector back its thresholds and the frozen objects."""
        if self._saved is None:
            return
        gc.set_threshold(*self._saved)
        gc.unfreeze()
        self._saved = None


def freeze_for_exit(enabled: bool) -> None:
    """Set the whole heap aside from the collector as the ``run`` process exits (after the
    worker stopped, before ``sys.exit``), when ``enabled`` (``[worker] gc_tuning``).

    Python's shutdown runs full collections over a heap that is about to be freed whole; frozen
    objects are not examined. Exit handlers (:mod:`atexit`), the flushing of streams and the
    finalization of modules are unchanged; what it skips is collecting reference cycles at exit,
    whose finalizers Python does not promise to run at exit anyway.
    """
    if enabled:
        gc.freeze()
