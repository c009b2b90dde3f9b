"""The worker's side of one claimed lease: its clock and the session that writes under it.

* :mod:`worker.lease.clock`: the lease's end by the worker's own clock, and the cancel scopes
  that must not outlive it.
* :mod:`worker.lease.session`: :class:`LeaseSession`, every call made under the lease
  (heartbeat, event, artifact, transition, fail, release) with its key and retry budget; the
  heartbeat decision (:meth:`LeaseSession.heartbeat`) and the choice of the final report's
  request (``finish_many``, ``finish``, or the plain calls) each in one method;
* :mod:`worker.lease.batch`: the final reports of runs that end together, as one
  ``finish_many``; :mod:`worker.lease.agents`: the agent operations of a run.

It may touch the tracker's lease seam (:class:`~tracker_client.protocol.LeaseTracker`), the
retry layer and the scrubber; it knows nothing of executors, slots or the claim loop.
"""

from worker.lease.clock import LocalLease, safety_margin_s
from worker.lease.session import LeaseSession

__all__ = ["LeaseSession", "LocalLease", "safety_margin_s"]
