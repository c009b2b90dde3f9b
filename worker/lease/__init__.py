"""The worker's side of one claimed lease: its clock and the session that writes under it.

* :mod:`worker.lease.clock`: the lease's end by the worker's own clock, and the cancel scopes
  that must not outlive it.
* :mod:`worker.lease.session`: :class:`LeaseSession`, every call made under the lease
  (heartbeat, event, artifact, transition, fail, release) with its key and retry budget.

It may touch the tracker's lease seam (:class:`~tracker_client.protocol.LeaseTracker`), the
retry layer and the scrubber; it knows nothing of executors, slots or the claim loop.
"""

from worker.lease.clock import LocalLease, safety_margin_s
from worker.lease.session import LeaseSession

__all__ = ["LeaseSession", "LocalLease", "safety_margin_s"]
