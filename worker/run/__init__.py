"""One claimed task from the claim to the final report.

* :mod:`worker.run.task`: :class:`TaskRun`, the supervisor of the executor under its lease;
* :mod:`plugins.supervise`: the executor call and how every way it ends becomes an outcome
  (shared with :mod:`plugins.testing`);
* :mod:`worker.run.report`: the final report (transition, fail or release);
* :mod:`worker.run.log`, :mod:`worker.run.settings`: the run's log lines and its values.

It may touch the plugin API, the run's :class:`~worker.lease.LeaseSession` and the trigger
choice; slots, claims and the worker's life cycle are :mod:`worker.daemon`'s.
"""

from worker.run.settings import RunResult, RunSettings
from worker.run.task import TaskRun

__all__ = ["RunResult", "RunSettings", "TaskRun"]
