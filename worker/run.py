"""One claimed task: the executor under heartbeats, then the final report.

The shape (DESIGN.md "One task, end to end"):

1. The executor runs in the run's own task while the worker's :class:`~worker.keeper.LeaseKeeper`
   heartbeats the lease every ttl/3 and flushes buffered reports (one keeper task for all runs,
   instead of two loops per run). A heartbeat that says the lease is gone cancels the executor
   at once and nothing more is written for the run. So does the lease running out by the
   worker's own clock (:mod:`worker.run_lease`), even while a heartbeat hangs unanswered.
2. A per-task timeout (``metadata.timeout_s`` or the role's ``timeout_s``) cancels the executor
   and fails the run with reason ``timeout``.
3. The outcome is reported under a shield: buffered events, then ``transition`` with the claimed
   stage and version, or an ``error`` event and ``fail``. The trigger is chosen per pipeline
   and stage (:mod:`worker.triggers`); one the pipeline refuses fails the run with the allowed
   triggers and its source listed; a 409 is logged and dropped. The keeper's heartbeats
   stop when the executor ends (on NullTickets each one resets the lease to 300 s, so a worker
   killed mid-report would strand the task that long); the report heartbeats only when it is
   still retrying as the lease nears its end, and stops at the lease's end by our clock.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from plugins.api import ExecutionContext, Executor, Failure, Outcome, ReportPolicy, Transition
from plugins.proc.process import kill_deadline
from tracker_client.errors import (
    Conflict,
    InvalidTransition,
    LeaseLost,
    TrackerError,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)
from tracker_client.models import Lease
from tracker_client.protocol import Tracker
from worker.config import RoleConfig
from worker.keeper import LeaseKeeper
from worker.retry import RetryPolicy, call_with_retry
from worker.run_lease import LocalLease
from worker.run_parts import RunLog, TrackerSink, call_executor, timeout_of
from worker.scrub import RunScrubber
from worker.triggers import PipelineBook, choose_trigger
from worker.workdirs import default_workdir_base, remove_workdir, workdir_name

__all__ = ["RunResult", "RunSettings", "TaskRun"]

log = logging.getLogger("backlog_worker.worker")


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


class TaskRun:
    """Supervises one claimed task from the claim to the final report."""

    def __init__(
        self,
        *,
        tracker: Tracker,
        lease: Lease,
        role: RoleConfig,
        executor: Executor,
        settings: RunSettings,
        shutdown: anyio.Event,
        keeper: LeaseKeeper,
        instructions: str | None = None,
        claimed_at: float | None = None,
    ) -> None:
        """``claimed_at``: ``anyio.current_time()`` when the claim request was sent (default:
        now); the lease's end by our clock counts from there."""
        self.tracker = tracker
        self.lease = lease
        self.role = role
        self.executor = executor
        self.settings = settings
        self._shutdown = shutdown
        self._instructions = instructions
        self._keeper = keeper
        self._ctx: ExecutionContext | None = None
        self._clock = LocalLease(
            settings.lease_ttl_s,
            sent_at=anyio.current_time() if claimed_at is None else claimed_at,
            tracker_expires_ms=lease.expires_at_ms,
        )
        self._lost: LeaseLost | None = None
        self.scrub = RunScrubber(lease.lease_token.get_secret_value())
        self._reporting = False  # the executor is done: heartbeat only when the report needs it
        self.scope = anyio.CancelScope()
        self._log = RunLog.for_lease(log, lease, role.name)

    # -- helpers used by the sink -------------------------------------------------------------
    def lease_remaining_s(self) -> float:
        """Seconds the lease is still ours (by our own clock, less the safety margin)."""
        return self._clock.remaining_s()

    def new_key(self) -> str | None:
        """A fresh idempotency key for one logical write (None when the tracker needs none)."""
        return str(uuid.uuid4()) if self.settings.idempotency_keys else None

    async def add_event(self, kind: str, data: Any) -> None:
        """Write one event, retried within the lease; oversized data becomes a marker.

        Known secrets in ``kind`` and ``data`` are masked first (:mod:`worker.scrub`)."""
        scrub = self.scrub.get()
        kind, data = scrub.text(kind), scrub.data(data)
        key = self.new_key()

        async def write(payload: Any) -> int:
            return await call_with_retry(
                lambda: self.tracker.add_event(self.lease, kind, payload, idempotency_key=key),
                policy=self.settings.retry,
                budget_s=self.lease_remaining_s(),
                action="add_event",
            )

        try:
            await write(data)
        except ValidationFailed as exc:
            key = self.new_key()
            await write({"dropped": True, "reason": str(exc)})

    # -- the run --------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Cancel the executor (shutdown past its grace); the final report still happens."""
        self.scope.cancel()

    async def execute(self) -> RunResult:
        """Run the executor under heartbeats, then report. Never raises for task problems."""
        self._log.claimed()
        workdir = self._workdir_path()
        ctx: ExecutionContext | None = None
        try:
            ctx = ExecutionContext(
                task=self.lease.task,
                run=self.lease.run,
                workdir=workdir,
                sink=TrackerSink(self),
                options=self.role.options,
                instructions=self._instructions,
                shutdown=self._shutdown,
                logger=self._log,
                report_policy=ReportPolicy(flush_interval_s=self.settings.report_flush_s),
            )
            timeout = timeout_of(self.lease, self.role)
            if timeout is not None:
                ctx.deadline = anyio.current_time() + timeout
            # Heartbeats and periodic flushes come from the worker's keeper, until the report is
            # done (after the executor, heartbeat_once sends one only when the report needs it).
            self._ctx = ctx
            self._keeper.add(self)
            try:
                return await self._execute_and_report(ctx, timeout)
            finally:
                self._keeper.remove(self)
        finally:
            if ctx is not None and ctx.workdir_created and not self.settings.keep_workdirs:
                with anyio.CancelScope(shield=True):
                    await remove_workdir(workdir, self._workdir_base())

    async def _execute_and_report(self, ctx: ExecutionContext, limit_s: float | None) -> RunResult:
        outcome: Outcome | None = None
        # The scope's deadline is the lease's end by our clock (moved by each heartbeat that got
        # through); a heartbeat that finds the lease gone cancels it at once.
        with self._clock.watch(self.scope):
            # its processes get SIGKILL before the lease ends, whatever their grace
            bound = kill_deadline.set(self._kill_by)
            try:
                outcome = await call_executor(self.executor, ctx, limit_s)
            finally:
                kill_deadline.reset(bound)
                self._clock.unwatch(self.scope)
        self._reporting = True
        if self._lost is None and self._clock.expired():
            self._lost = LeaseLost(
                "the lease ran out by the worker's clock before a heartbeat got through",
                code="expired_locally",
            )
        if self._lost is not None:
            self._log.warning(
                "lease lost (%s): executor cancelled, nothing reported",
                self._lost.code,
                extra={"action": "lease_lost"},
            )
            return RunResult("lost", self._lost.code)
        if outcome is None:  # cancelled by the worker's shutdown
            outcome = Failure(
                reason="worker_shutdown",
                message="the worker shut down before the task finished",
                retryable=True,
            )
        return await self._report_under_lease(ctx, outcome)

    def _workdir_base(self) -> Path:
        # The worker passes its prepared base; a TaskRun built without one uses the same default.
        return self.settings.workdir_base or default_workdir_base()[0]

    def _workdir_path(self) -> str:
        # Named after the run id (unique; hashed when it is not one safe path component),
        # created only if the executor asks for it.
        return os.path.join(self._workdir_base(), workdir_name(self.lease.run.id))

    def _kill_by(self) -> float:
        """When the run's processes must be dead: half the safety margin before the lease ends."""
        return self._clock.expires_at - self._clock.margin_s / 2

    # -- kept by the worker's LeaseKeeper ------------------------------------------------------
    @property
    def heartbeat_interval_s(self) -> float:
        """A third of the lease TTL: two heartbeats may fail before the lease runs out."""
        return self.settings.lease_ttl_s / 3

    @property
    def flush_interval_s(self) -> float:
        """How often buffered reports are written when the executor doesn't flush itself."""
        return self.settings.report_flush_s

    def has_pending_reports(self) -> bool:
        """Whether the executor's context holds reports not written yet."""
        return self._ctx is not None and self._ctx.has_buffered_reports

    async def flush_once(self) -> bool:
        """Write buffered reports, so a quiet executor's last events don't wait for the end of
        the run. False (stop flushing this run) when the tracker refused them."""
        if self._ctx is None:
            return True
        try:
            # Shielded: cancelling a flush halfway would lose the batch it took.
            with anyio.CancelScope(shield=True):
                await self._ctx.flush()
        except TrackerError as exc:
            self._log.warning(
                "could not write reports: %s", exc, extra={"action": "report_flush_failed"}
            )
            return False
        return True

    async def heartbeat_once(self) -> bool:
        """Extend the lease. When it is gone (or could not be extended before running out),
        cancel the executor and return False; nothing more is written for this run."""
        if self._reporting and self._clock.remaining_s() >= self.settings.lease_ttl_s / 2:
            # After the executor, the report needs no heartbeat while half the lease is left: a
            # quick report sends none (on NullTickets each one would reset the lease to 300 s);
            # one still retrying gets one with at least a sixth of the TTL to spare.
            return True
        ttl_ms = int(self.settings.lease_ttl_s * 1000)
        sent = anyio.current_time()
        try:
            expires_ms = await call_with_retry(
                lambda: self.tracker.heartbeat(self.lease, lease_ttl_ms=ttl_ms),
                policy=self.settings.retry,
                budget_s=self.lease_remaining_s(),
                action="heartbeat",
            )
        except LeaseLost as exc:
            self._lost = exc
        except TrackerUnavailable as exc:
            # We could not extend the lease before it ran out: someone else may have it now.
            self._lost = LeaseLost(f"heartbeat failed until the lease ran out: {exc}")
        else:
            self._clock.extended(sent, expires_ms)
            return True
        self._clock.cancel_all()
        return False

    # -- final report -------------------------------------------------------------------------
    async def _report_under_lease(self, ctx: ExecutionContext, outcome: Outcome) -> RunResult:
        """The report, stopped at the lease's end by our clock (or when a heartbeat finds the
        lease gone): past it the task may be someone else's, so nothing more is written."""
        result: RunResult | None = None
        # Shielded from the worker's shutdown (the report is how a cancelled run gives its task
        # back), yet ended by its own deadline: the lease's end by our clock.
        with self._clock.watch(anyio.CancelScope(shield=True)) as scope:
            try:
                result = await self._report(ctx, outcome)
            finally:
                self._clock.unwatch(scope)
        if result is not None:
            return result
        why = self._lost.code if self._lost is not None else "expired_locally"
        self._log.warning(
            "lease lost during the final report (%s); result dropped",
            why,
            extra={"action": "lease_lost"},
        )
        return RunResult("lost", why)

    async def _report(self, ctx: ExecutionContext, outcome: Outcome) -> RunResult:
        budget = self.settings.report_retry_budget_s
        try:
            await ctx.flush()
            if isinstance(outcome, Transition):
                return await self._transition(outcome, budget)
            return await self._fail(outcome, budget)
        except LeaseLost as exc:
            self._log.warning(
                "lease lost before the report (%s); result dropped",
                exc.code,
                extra={"action": "lease_lost"},
            )
            return RunResult("lost", exc.code)
        except Conflict as exc:
            self._log.warning(
                "task changed under us (%s); result dropped",
                exc.code,
                extra={"action": "report_conflict"},
            )
            return RunResult("conflict", exc.code)
        except TrackerError as exc:
            self._log.error("final report failed: %s", exc, extra={"action": "report_failed"})
            return RunResult("report_failed", str(exc))

    async def _transition(self, outcome: Transition, budget: float) -> RunResult:
        task = self.lease.task
        choice = await choose_trigger(
            outcome,
            self.role,
            task,
            self.tracker,
            self.settings.pipelines,
            policy=self.settings.retry,
            budget_s=budget,
        )
        trigger = choice.trigger
        if trigger is None:
            return await self._fail(choice.failure(self.role, task.stage, outcome.usage), budget)
        key = self.new_key()
        instructions, usage = outcome.instructions, outcome.usage
        if instructions is not None or usage is not None:  # else no scrubber is even built
            scrub = self.scrub.get()
            instructions = None if instructions is None else scrub.text(instructions)
            usage = scrub.data(usage)
        try:
            result = await call_with_retry(
                lambda: self.tracker.transition(
                    self.lease,
                    trigger,
                    expected_stage=task.stage,
                    expected_task_version=task.task_version,
                    instructions=instructions,
                    usage=usage,
                    idempotency_key=key,
                ),
                policy=self.settings.retry,
                budget_s=budget,
                action="transition",
            )
        except InvalidTransition as exc:
            failure = choice.failure(self.role, task.stage, outcome.usage, refused=exc.allowed)
            return await self._fail(failure, budget)
        self._log.info(
            "transitioned %s -> %s (%s)",
            result.previous_stage,
            result.new_stage,
            trigger,
            extra={"action": "run_transitioned", "trigger": trigger, "trigger_from": choice.source},
        )
        return RunResult("transitioned", result.new_stage)

    async def _release(self, failure: Failure, budget: float) -> RunResult:
        """A shutdown is not the task's fault: give the task back without spending an attempt
        (a NullTickets server, which cannot, is left to let the lease expire)."""
        key = self.new_key()
        try:
            result = await call_with_retry(
                lambda: self.tracker.release(self.lease, failure.reason, idempotency_key=key),
                policy=self.settings.retry,
                budget_s=budget,
                action="release",
            )
            how = "given back" if result.released else "left to its lease's expiry"
        except Unsupported:
            how = "left to its lease's expiry"
        self._log.info(
            "run ended by shutdown: task %s, no attempt counted",
            how,
            extra={"action": "run_released", "reason": failure.reason},
        )
        return RunResult("released", failure.reason)

    async def _fail(self, failure: Failure, budget: float) -> RunResult:
        if failure.reason == "worker_shutdown":
            return await self._release(failure, budget)
        details = {
            "reason": failure.reason,
            "message": failure.message,
            "retryable": failure.retryable,
            **dict(failure.details),
        }
        await self.add_event("error", details)
        key = self.new_key()
        error = f"{failure.reason}: {failure.message}" if failure.message else failure.reason
        scrub = self.scrub.get()
        error, usage = scrub.text(error), scrub.data(failure.usage)
        result = await call_with_retry(
            lambda: self.tracker.fail(
                self.lease,
                error,
                usage=usage,
                retryable=failure.retryable,
                idempotency_key=key,
            ),
            policy=self.settings.retry,
            budget_s=budget,
            action="fail",
        )
        dead = bool(result.dead_lettered)
        outcome = "dead_lettered" if dead else "retry_scheduled" if result.retry_scheduled else None
        extra = {"action": "run_failed", "reason": failure.reason, "outcome": outcome or "failed"}
        self._log.warning("run %s: %s", "dead-lettered" if dead else "failed", error, extra=extra)
        retry_at = None if dead or not result.retry_scheduled else result.next_eligible_at_ms
        return RunResult("failed", failure.reason, dead_lettered=dead, retry_at_ms=retry_at)
