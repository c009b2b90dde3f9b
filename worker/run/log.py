"""A run's log: its ids on every line, and the two lines that begin and end it.

It may touch :mod:`logging` only (the claimed lease is read for its ids).
"""

from __future__ import annotations

import logging
import time
from collections.abc import MutableMapping
from typing import Any

from tracker_client.models import Lease

__all__ = ["FINISH_ACTIONS", "RunLog"]

#: The line ending a run, by action, and its default ``outcome`` (``run_failed`` names its own:
#: ``retry_scheduled``, ``dead_lettered`` or ``failed``).
FINISH_ACTIONS: dict[str, str] = {
    "run_transitioned": "transitioned",
    "run_failed": "failed",
    "run_released": "released",
    "lease_lost": "lost",
    "report_conflict": "conflict",
    "report_failed": "report_failed",
}


class RunLog(logging.LoggerAdapter[logging.Logger]):
    """Adds the run's ids to every record and keeps the call's own ``extra`` (``action``...).

    A run's life is two lines: :meth:`claimed` (``run_start``, with the attempt and stage) and
    the one that ends it (an action of :data:`FINISH_ACTIONS`), which gets its ``outcome`` and
    ``duration_s`` (since the claim) added here. The stock adapter replaces a call's ``extra``
    with its own before Python 3.13.

    The ids are read off the lease when a line is first logged (:attr:`extra`): a worker
    logging at WARNING logs no line for most runs, and gathers nothing for them.
    """

    def __init__(self, logger: logging.Logger, extra: dict[str, Any] | None) -> None:
        super().__init__(logger, extra)
        self._started = time.monotonic()
        self._lease: Lease | None = None  # the ids' lease while they are not gathered yet
        self._role = ""

    @classmethod
    def for_lease(cls, logger: logging.Logger, lease: Lease, role: str) -> RunLog:
        """The log of the run of ``lease`` for ``role``: ids, attempt and stage on every line."""
        run_log = cls(logger, None)
        run_log._lease, run_log._role = lease, role
        return run_log

    @property  # type: ignore[override]
    def extra(self) -> dict[str, Any] | None:
        """The ids added to every line (task, run, role, attempt, stage)."""
        lease = self._lease
        if lease is not None:
            task, run = lease.task, lease.run
            self._extra: dict[str, Any] | None = {
                "task_id": task.id,
                "run_id": run.id,
                "role": self._role,
                "attempt": run.attempt,
                "stage": task.stage,
            }
            self._lease = None
        return self._extra

    @extra.setter
    def extra(self, value: dict[str, Any] | None) -> None:
        self._extra, self._lease = value, None

    def claimed(self) -> None:
        """The run's first line."""
        if not self.isEnabledFor(logging.INFO):
            return  # (a worker logging at WARNING: not even the arguments are gathered)
        extra = self.extra or {}
        self.info(
            "task claimed at stage %s (attempt %s)",
            extra.get("stage"),
            extra.get("attempt"),
            extra={"action": "run_start"},
        )

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        """Add the run's ids to each record's ``extra`` (a finishing one: outcome, duration)."""
        extra = {**(self.extra or {}), **kwargs.get("extra", {})}
        outcome = FINISH_ACTIONS.get(str(extra.get("action")))
        if outcome is not None:
            took = round(time.monotonic() - self._started, 3)
            extra.setdefault("outcome", outcome)
            extra["duration_s"] = took
            msg = f"{msg} (took {took:.2f}s)"
        kwargs["extra"] = extra
        return msg, kwargs
