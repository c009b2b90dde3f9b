"""A run's final report: its outcome turned into a transition, a fail or a release.

The report runs under a shield (it is how a cancelled run gives its task back) yet ends at the
lease's end by our clock: past it the task may be someone else's, so nothing more is written.
First the pending checkpoint and the executor's buffered events (where the worker batches
reports, those ride with the report in its item: one request); then, for a
:class:`~plugins.api.Transition`, the trigger chosen per pipeline and stage
(:mod:`worker.triggers`) sent with the claimed stage and version (one the pipeline refuses fails
the run, naming the allowed triggers and the choice's source; a ``wait_for`` the rail refuses,
an unknown task or a cycle, fails it ``bad_wait_for``); for a :class:`~plugins.api.Failure`, an
``error`` event and ``fail``, except a shutdown, which releases the task without spending an
attempt. A 409 is logged and dropped.

It may touch the tracker through the run's :class:`~worker.lease.LeaseSession` only (and reads
pipeline definitions for the trigger).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any

import anyio

from plugins.api import Failure, Outcome, Transition
from plugins.context_hooks import ContextHooks
from tracker_client.contract.batch_models import MAX_FINISH_EVENTS
from tracker_client.errors import (
    Conflict,
    InvalidTransition,
    LeaseLost,
    NotFound,
    TrackerError,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)
from tracker_client.models import TransitionResult
from tracker_client.protocol import LeaseTracker
from worker.config.models import RoleConfig
from worker.lease import LeaseSession
from worker.run.log import RunLog
from worker.run.settings import RunResult, RunSettings
from worker.triggers import choose_again, choose_trigger

__all__ = ["FinalReport"]

#: The code of a ``wait_for`` that would close a dependency cycle (or name the task itself).
CYCLE = "dependency_cycle"
#: The run ended by the worker's shutdown: the task is given back, no attempt spent.
SHUTDOWN = "worker_shutdown"
#: The executor was stopped at the lease's confirmed end (no heartbeat got through) while the
#: tracker may still hold the lease: the task is given back rather than left held
#: (docs/guarantees/stalled-tracker.md).
LEASE_EXPIRED = "lease_expired"


class FinalReport:
    """Reports one run's outcome under its lease (see the module docstring)."""

    def __init__(
        self,
        session: LeaseSession,
        tracker: LeaseTracker,
        role: RoleConfig,
        settings: RunSettings,
        log: RunLog,
    ) -> None:
        """``tracker``: where pipeline definitions are read (for choosing a trigger)."""
        self._session = session
        self._tracker = tracker
        self._role = role
        self._settings = settings
        self._log = log

    async def send(self, hooks: ContextHooks, outcome: Outcome) -> RunResult:
        """The report, stopped when the tracker can no longer hold the lease by our clock
        (a hung heartbeat may have landed: until then the task is held, and the report keeps
        trying, refused by the tracker if the lease is gone) or when it says the lease is
        gone."""
        session = self._session
        result: RunResult | None = None
        # Shielded from the worker's shutdown, yet ended by its own deadline.
        with session.clock.watch_report(anyio.CancelScope(shield=True)) as scope:
            try:
                result = await self.send_within(hooks, outcome)
            finally:
                session.clock.unwatch(scope)
        return self.dropped() if result is None else result

    def send_within(self, hooks: ContextHooks, outcome: Outcome) -> Coroutine[Any, Any, RunResult]:
        """The report (a coroutine to await), in the caller's scope: one the lease's clock
        watches as a report's (:meth:`LocalLease.to_report
        <worker.lease.clock.LocalLease.to_report>`); when that scope ends it, the caller's
        result is :meth:`dropped`."""
        # budgets: ctx.report_cost's figures ride in usage
        return self._report(hooks, hooks.with_cost(outcome))

    def dropped(self) -> RunResult:
        """The run's result when its report was ended by the lease's end or loss."""
        session = self._session
        why = session.lost.code if session.lost is not None else "expired_locally"
        self._log.warning(
            "lease lost during the final report (%s); result dropped",
            why,
            extra={"action": "lease_lost"},
        )
        return RunResult("lost", why)

    async def _report(self, hooks: ContextHooks, outcome: Outcome) -> RunResult:
        budget = self._settings.report_retry_budget_s
        try:
            # The run's buffered events ride with the report where reports are batched (one
            # item, one request): taken here, with no await, in the common case.
            taken = hooks.take_reports() if self._session.reports is not None else None
            if taken is not None and len(taken) < MAX_FINISH_EVENTS:
                events = taken
            else:
                events = await self._last_events(hooks, taken)
            if self._session.checkpoint_pending():  # else nothing to write (most runs)
                await self._checkpoint()
            if isinstance(outcome, Transition):
                return await self._transition(outcome, budget, events)
            return await self._fail(outcome, budget, events)
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

    async def _last_events(
        self, hooks: ContextHooks, taken: list[tuple[str, Any]] | None
    ) -> list[tuple[str, Any]]:
        """The run's buffered events when they cannot ride with the report (reports not
        batched, a flush in flight: ``taken`` None; or too many taken): written now, and
        none left for the report."""
        if taken:
            await self._session.add_events(taken)
        await hooks.flush()
        return []

    async def _checkpoint(self) -> None:
        """The run's pending checkpoint first (the next attempt's ``previous_checkpoint``); one
        the rail refuses, or that cannot be written, is logged and the report goes on."""
        try:
            await self._session.flush_checkpoint()
        except (ValidationFailed, Unsupported, TrackerUnavailable) as exc:
            self._log.warning(
                "checkpoint not written: %s", exc, extra={"action": "checkpoint_failed"}
            )

    async def _transition(
        self, outcome: Transition, budget: float, events: list[tuple[str, Any]]
    ) -> RunResult:
        task, role = self._session.lease.task, self._role
        pipelines = self._settings.pipelines
        choice = pipelines.choice(outcome, role, task) or await choose_trigger(
            outcome,
            role,
            task,
            self._tracker,
            pipelines,
            policy=self._settings.retry,
            budget_s=budget,
        )
        trigger = choice.trigger
        if trigger is None:
            return await self._fail(choice.failure(role, task.stage, outcome.usage), budget, events)
        if outcome.wait_for:  # not a batched report: the events go first, on their own
            await self._session.add_events(events)
            events = []

        def send(trigger: str) -> Awaitable[TransitionResult]:
            return self._session.transition(
                trigger,
                expected_stage=task.stage,
                expected_task_version=task.task_version,
                instructions=outcome.instructions,
                usage=outcome.usage,
                budget_s=budget,
                wait_for=tuple(outcome.wait_for) if outcome.wait_for else (),
                events=events,
            )

        try:
            try:
                result = await send(trigger)
            except InvalidTransition as refusal:
                # A newer version of the pipeline may have changed the stage's ways: read it
                # again and send the trigger it gives, once (the lease is kept on a refusal).
                again = await choose_again(
                    choice,
                    refusal.allowed,
                    outcome,
                    role,
                    task,
                    self._tracker,
                    self._settings.pipelines,
                    policy=self._settings.retry,
                    budget_s=budget,
                )
                if again is None or again.trigger is None:
                    raise
                choice, trigger = again, again.trigger
                result = await send(trigger)
        except InvalidTransition as exc:
            # A refused batched item wrote nothing: its events go with the fail.
            failure = choice.failure(role, task.stage, outcome.usage, refused=exc.allowed)
            return await self._fail(failure, budget, events)
        except (NotFound, Conflict, Unsupported) as exc:
            if not outcome.wait_for or (isinstance(exc, Conflict) and exc.code != CYCLE):
                if events:  # the refused item wrote nothing: keep the run's last events
                    with contextlib.suppress(TrackerError):
                        await self._session.add_events(events)
                raise
            # The rail refused the edges (an unknown task, a cycle): the same output would
            # be refused again, so the run fails for good, naming what is wrong.
            failure = Failure(
                reason="bad_wait_for",
                message=f"Transition({trigger!r}, wait_for={list(outcome.wait_for)}): {exc}",
                retryable=False,
                usage=outcome.usage,
            )
            return await self._fail(failure, budget, events)
        if not self._log.isEnabledFor(logging.INFO):
            return RunResult("transitioned", result.new_stage)
        self._log.info(
            "transitioned %s -> %s (%s)",
            result.previous_stage,
            result.new_stage,
            trigger,
            extra={"action": "run_transitioned", "trigger": trigger, "trigger_from": choice.source},
        )
        return RunResult("transitioned", result.new_stage)

    async def _release(
        self, failure: Failure, budget: float, events: list[tuple[str, Any]]
    ) -> RunResult:
        """A shutdown or a lease stopped by a hung tracker is not the task's fault: give the
        task back without spending an attempt. A rail that cannot (plain NullTickets) leaves
        a shutdown's task to its lease's expiry; a stopped lease's task is failed (retryable)
        instead, as the tracker may hold it 300 s after a heartbeat that landed."""
        if failure.reason == LEASE_EXPIRED and not self._settings.can_release:
            return await self._fail_run(failure, budget, events)
        await self._session.add_events(events)
        try:
            released = (await self._session.release(failure.reason, budget_s=budget)).released
        except Unsupported:
            released = False
        if not released and failure.reason == LEASE_EXPIRED:
            return await self._fail_run(failure, budget, [])
        why = "shutdown" if failure.reason == SHUTDOWN else "an unconfirmed lease"
        self._log.info(
            "run ended by %s: task %s, no attempt counted",
            why,
            "given back" if released else "left to its lease's expiry",
            extra={"action": "run_released", "reason": failure.reason},
        )
        return RunResult("released", failure.reason)

    async def _fail(
        self, failure: Failure, budget: float, events: list[tuple[str, Any]]
    ) -> RunResult:
        if failure.reason in (SHUTDOWN, LEASE_EXPIRED):
            return await self._release(failure, budget, events)
        return await self._fail_run(failure, budget, events)

    async def _fail_run(
        self, failure: Failure, budget: float, events: list[tuple[str, Any]]
    ) -> RunResult:
        """Fail the run: its ``error`` event and the fail (one request where reports batch)."""
        session = self._session
        details = {
            "reason": failure.reason,
            "message": failure.message,
            "retryable": failure.retryable,
            **dict(failure.details),
        }
        error = f"{failure.reason}: {failure.message}" if failure.message else failure.reason
        error = session.scrub.get().text(error)  # the log line shows what the tracker got
        # The error event and the fail: one request where the rail has ``finish``.
        result = await session.fail(
            error,
            usage=failure.usage,
            retryable=failure.retryable,
            budget_s=budget,
            events=events,
            event=("error", details),
        )
        dead = bool(result.dead_lettered)
        outcome = "dead_lettered" if dead else "retry_scheduled" if result.retry_scheduled else None
        extra = {"action": "run_failed", "reason": failure.reason, "outcome": outcome or "failed"}
        self._log.warning("run %s: %s", "dead-lettered" if dead else "failed", error, extra=extra)
        retry_at = None if dead or not result.retry_scheduled else result.next_eligible_at_ms
        return RunResult("failed", failure.reason, dead_lettered=dead, retry_at_ms=retry_at)
