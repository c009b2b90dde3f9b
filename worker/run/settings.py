"""What a run needs from the worker's configuration, and how a run ended.

Values only: built by the worker once per role and configuration, read by
:class:`~worker.run.TaskRun` and its report.

No I/O: it may use the lease, retry and trigger rooms' types (and the plugin API's report
policy) to build a run's session and calls, and the run directories' default base
(:func:`worker.workdirs.default_workdir_base`, read from the environment), and calls nothing
itself.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from plugins.api import ReportPolicy
from tracker_client.models import Lease
from tracker_client.protocol import LeaseTracker, RailParts
from worker.lease import LeaseSession
from worker.lease.batch import ReportBatcher
from worker.retry import RetryPolicy, TrackerCalls
from worker.telemetry import NOOP, Telemetry
from worker.triggers import PipelineBook
from worker.workdirs import default_workdir_base

__all__ = ["RunResult", "RunSettings"]


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What a run needs from the worker's configuration."""

    lease_ttl_s: float
    retry: RetryPolicy
    report_retry_budget_s: float
    workdir_base: Path | None = None
    keep_workdirs: bool = False
    report_flush_s: float = 1.0
    #: False for a tracker that cannot lose an answer (then a key would only cost a record).
    idempotency_keys: bool = True
    #: Pipeline definitions for choosing triggers, shared by the runs of these settings.
    pipelines: PipelineBook = field(default_factory=PipelineBook, compare=False)
    #: The worker's metrics and traces (the no-op when both are off).
    telemetry: Telemetry = field(default=NOOP, compare=False)
    #: The worker's batcher of final reports (the rail has ``finish_many``), or None.
    reports: ReportBatcher | None = field(default=None, compare=False)
    #: What one heartbeat grants whatever TTL it asks: 300 s on a plain NullTickets server,
    #: whose heartbeat resets every lease to that; None where the TTL asked is kept. The
    #: lease's ends follow it (docs/guarantees/stalled-tracker.md).
    heartbeat_grant_s: float | None = None
    #: The tracker gives a task back at once on ``release`` (a plain NullTickets server has no
    #: such route: a run to hand back is failed there, retryable).
    can_release: bool = True
    #: The whole rail and the extensions it declared (None: a lease seam only).
    parts: RailParts | None = field(default=None, compare=False)
    #: The retry policy and the key rule of every call a run makes. This and
    #: :attr:`report_policy` are built once for all the runs of these settings (values: every
    #: run would build equal ones) and read as fields, not properties: a property is an
    #: unspecialised attribute load and a call on CPython 3.11, once per run.
    calls: TrackerCalls = field(init=False, repr=False, compare=False)
    #: How a run's context batches its reports (its flush interval: ``report_flush_s``).
    report_policy: ReportPolicy = field(init=False, repr=False, compare=False)
    _workdir_prefix: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        calls = TrackerCalls(self.retry, keys=self.idempotency_keys, telemetry=self.telemetry)
        object.__setattr__(self, "calls", calls)
        policy = ReportPolicy(flush_interval_s=self.report_flush_s)
        object.__setattr__(self, "report_policy", policy)

    def workdir_of(self, name: str) -> str:
        """The path of the run directory ``name`` under the prepared base (the default base
        when none was given): the base is read once for all the runs of these settings."""
        prefix = self._workdir_prefix
        if prefix is None:
            base = self.workdir_base or default_workdir_base()[0]
            prefix = os.path.join(base, "")  # the base and one separator
            object.__setattr__(self, "_workdir_prefix", prefix)
        return prefix + name

    def session(
        self,
        tracker: LeaseTracker,
        lease: Lease,
        *,
        claimed_at: float | None = None,
        log: logging.LoggerAdapter[logging.Logger],
        clock: Callable[[], float] | None = None,
    ) -> LeaseSession:
        """Open the session of a claimed ``lease`` (claimed at ``claimed_at``, default now),
        logging to the run's ``log``; ``clock``: the running loop's, when the caller holds it
        (:func:`~worker.lease.clock.loop_clock`)."""
        # (positional, as TaskRun is built: no dict of keyword arguments per run)
        return LeaseSession(
            tracker,
            lease,
            self.calls,
            self.lease_ttl_s,
            claimed_at,
            self.reports,
            self.heartbeat_grant_s,
            self.parts,
            log,
            clock,
        )


@dataclass(slots=True)
class RunResult:
    """How one run ended, for the worker's counters and logs."""

    status: str  # "transitioned" | "failed" | "released" | "lost" | "conflict" | "report_failed"
    detail: str = ""
    #: A failed run's task was dead-lettered (no retry follows).
    dead_lettered: bool = False
    #: A failed run's task retries from then (the tracker's clock, epoch ms), when it says so:
    #: a draining worker waits for it.
    retry_at_ms: int | None = None

    @property
    def landed(self) -> bool:
        """Whether the run's report reached the tracker and was answered (a transition, a fail,
        a release, or a conflict the tracker named): the watchdog's progress. A run lost to a
        hung tracker, or whose report failed, is not."""
        return self.status in ("transitioned", "failed", "released", "conflict")
