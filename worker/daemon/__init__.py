"""The worker daemon: claims tasks for its roles and runs each under its lease.

* :mod:`worker.daemon.worker`: :class:`Worker`, the life cycle and the staged shutdown;
* :mod:`worker.daemon.claimer`: slots, claims (one request each) and the runs they start;
* :mod:`worker.daemon.running`: one record per running task and per open claim, and the counts
  the claim loop reads off them;
* :mod:`worker.daemon.pacing`: claim overlap, idle back-off, conclusive empty rounds (pure);
* :mod:`worker.daemon.drain`: when a draining worker may exit;
* :mod:`worker.daemon.watch`: the tracker's wake-ups; :mod:`worker.daemon.book`: each role's
  run settings; :mod:`worker.daemon.values`: value types.

It may touch the tracker, the runs (:mod:`worker.run`) and the lease keeper; the CLI wires it
to signals and systemd.
"""

from worker.daemon.values import Role, WorkerState, WorkerStats
from worker.daemon.worker import Worker

__all__ = ["Role", "Worker", "WorkerState", "WorkerStats"]
