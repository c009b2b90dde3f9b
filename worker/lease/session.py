"""One claimed lease and every write made under it: the worker's side of the lease seam.

A :class:`LeaseSession` is opened for each lease the worker claims and owns it until the run's
last write: the lease's end by the worker's own clock (:mod:`worker.lease.clock`), the
idempotency keys (only where the tracker's capabilities say answers can be lost), the retry
budget of each call (one layer, :class:`~worker.retry.TrackerCalls`: the lease's remaining time
for heartbeats and run writes, the report budget for the final transition, fail or release),
and the scrubbing of known secrets from everything written (:mod:`worker.scrub`).

It talks to a :class:`~tracker_client.protocol.LeaseTracker` and hands it ``lease.ref`` (a
:class:`~tracker_client.capabilities.LeaseRef`), never the whole claimed ``Lease``. It knows
nothing of executors: :class:`~worker.run.TaskRun` supervises those and writes through it.
The agent operations (store, subtasks, upstream, checkpoints) are :attr:`LeaseSession.agent`'s
(:mod:`worker.lease.agents`), made on first use; a pending checkpoint rides on the next
heartbeat. Where the worker batches final reports (:mod:`worker.lease.batch`: the rail has
``finish_many``), the transition and the fail go through its batcher, each still under this
session's retries, key and token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from tracker_client.agent_models import UNSET
from tracker_client.capabilities import LeaseRef
from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.errors import LeaseLost, TrackerUnavailable, Unsupported, ValidationFailed
from tracker_client.models import (
    ArtifactCreate,
    FailResult,
    Lease,
    ReleaseResult,
    TransitionResult,
)
from tracker_client.protocol import LeaseTracker, RailParts
from worker.lease.agents import AgentCalls
from worker.lease.batch import ReportBatcher
from worker.lease.clock import LocalLease, loop_time
from worker.retry import TrackerCalls
from worker.scrub import RunScrubber

__all__ = ["LeaseSession"]


class LeaseSession:
    """The lease of one claimed task, from the claim to the last write under it."""

    def __init__(
        self,
        tracker: LeaseTracker,
        lease: Lease,
        *,
        calls: TrackerCalls,
        ttl_s: float,
        claimed_at: float | None = None,
        reports: ReportBatcher | None = None,
        heartbeat_grant_s: float | None = None,
        parts: RailParts | None = None,
    ) -> None:
        """``claimed_at``: ``anyio.current_time()`` when the claim request was sent (default:
        now); the lease's end by our clock counts from there. ``reports``: the worker's batcher
        of final reports (None: each report is its own call). ``heartbeat_grant_s``: what a
        heartbeat of this tracker grants whatever TTL it asks (300 s on a plain NullTickets
        server; None: the TTL asked). ``parts``: the whole rail and the extensions it declared,
        chosen at the worker's start (None: a lease seam only, no store or task calls)."""
        self.tracker = tracker
        self.reports = reports
        self.parts = parts
        #: The claimed lease: its task and run, for the executor's context and the log.
        self.lease = lease
        #: What lease operations are sent (ids and token, no task).
        self.ref: LeaseRef = lease.ref
        self.calls = calls
        self.ttl_s = ttl_s
        #: The lease's end on our monotonic clock; scopes doing work under it follow it.
        self.clock = LocalLease(
            ttl_s,
            sent_at=loop_time() if claimed_at is None else claimed_at,
            tracker_expires_ms=lease.expires_at_ms,
            heartbeat_grant_s=heartbeat_grant_s,
        )
        #: Why the lease is gone (the tracker said so, or it ran out by our clock), or None.
        self.lost: LeaseLost | None = None
        self._scrub: RunScrubber | None = None
        self._agent: AgentCalls | None = None
        #: A heartbeat gave up before the confirmed end: the work was stopped.
        self.unconfirmed = False
        #: Why the rail refused the last checkpoint a heartbeat carried (None: no refusal).
        self.checkpoint_error: str | None = None

    @property
    def scrub(self) -> RunScrubber:
        """Masks known secrets and this lease's token in everything written (made on first
        use: a no-op run's transition writes nothing to scrub)."""
        if self._scrub is None:
            self._scrub = RunScrubber(self.lease.lease_token.get_secret_value())
        return self._scrub

    @property
    def agent(self) -> AgentCalls:
        """The run's agent operations (made on first use: most runs never ask)."""
        if self._agent is None:
            self._agent = AgentCalls(self)
        return self._agent

    def remaining_s(self) -> float:
        """Seconds the lease is still ours (by our own clock, less the safety margin)."""
        return self.clock.remaining_s()

    def check_expired(self) -> LeaseLost | None:
        """Why the lease is gone, noting an end by our own clock that no heartbeat reported:
        the tracker said so, or it can no longer hold the lease even if a hung heartbeat
        landed (:meth:`LocalLease.released`). A lease past its confirmed end only is not gone:
        the run still reports or hands the task back (docs/guarantees/stalled-tracker.md)."""
        if self.lost is None and self.clock.released():
            self.lost = LeaseLost(
                "the lease ran out by the worker's clock before a heartbeat got through",
                code="expired_locally",
            )
        return self.lost

    def expired(self) -> bool:
        """Whether the lease's confirmed end (less the margin) has passed, or a heartbeat gave
        up before it: no more work under it, though the tracker may still hold it for a
        report."""
        return self.unconfirmed or self.clock.expired()

    # -- keeping the lease ----------------------------------------------------------------------
    async def heartbeat(self) -> bool:
        """Extend the lease (retried while it is confirmed). False to stop heartbeating: when
        the tracker says it is gone, every scope watching the clock is cancelled (nothing more
        may be written under it); when no heartbeat got through before the confirmed end, the
        work is cancelled but the report may still try, until the latest end the tracker may
        hold (a hung heartbeat may have landed: :mod:`worker.lease.clock`)."""
        ttl_ms = int(self.ttl_s * 1000)
        sent = anyio.current_time()
        agent = self._agent
        data = agent.take_checkpoint() if agent is not None else UNSET
        clock = self.clock
        clock.heartbeat_sent()
        answered = False
        try:
            if data is UNSET:
                expires_ms = await self.calls.read(
                    "heartbeat",
                    lambda: self.tracker.heartbeat(self.ref, lease_ttl_ms=ttl_ms),
                    budget_s=self.remaining_s(),
                )
            else:
                expires_ms = await self._heartbeat_with(data, ttl_ms)
            answered = True
        except LeaseLost as exc:
            answered = True  # the tracker's answer: the lease is gone
            self.lost = exc
            clock.unanswered()
            clock.cancel_all()
            return False
        except TrackerUnavailable:
            # Not confirmed before the confirmed end: someone else may hold the task soon, so
            # the work stops; the report still tries (the heartbeat may have landed).
            self.unconfirmed = True
            clock.cancel_work()
            return False
        finally:
            if not answered:  # given up, timed out or cancelled: it may have landed
                clock.unanswered()
        clock.extended(sent, expires_ms)
        return True

    async def _heartbeat_with(self, data: Any, ttl_ms: int) -> int:
        """A heartbeat carrying the pending checkpoint; one the rail refuses is dropped (and
        the heartbeat sent without it), one not sent is kept for the next try."""
        assert self._agent is not None
        agent = self._agent
        try:
            expires: int = await self.calls.read(
                "heartbeat",
                lambda: agent.write_checkpoint(data, heartbeat=True, ttl_ms=ttl_ms),
                budget_s=self.remaining_s(),
            )
            return expires
        except (ValidationFailed, Unsupported) as exc:
            self.checkpoint_error = str(exc)
        except TrackerUnavailable:
            agent.restore_checkpoint(data)
            raise
        return await self.calls.read(
            "heartbeat",
            lambda: self.tracker.heartbeat(self.ref, lease_ttl_ms=ttl_ms),
            budget_s=self.remaining_s(),
        )

    def checkpoint_pending(self) -> bool:
        """Whether the executor kept a checkpoint not written yet."""
        return self._agent is not None and self._agent.checkpoint_pending

    def checkpoint_due(self) -> bool:
        """Whether a pending checkpoint should be written before the next heartbeat."""
        return self._agent is not None and self._agent.checkpoint_due()

    async def flush_checkpoint(self) -> None:
        """Write a pending checkpoint now (before the report, or when due between heartbeats).
        ``ValidationFailed``/``Unsupported`` when the rail refuses it (dropped); a tracker
        outage keeps it pending and raises."""
        agent = self._agent
        if agent is None or not agent.checkpoint_pending:
            return
        data = agent.take_checkpoint()
        try:
            await self.calls.read(
                "checkpoint",
                lambda: agent.write_checkpoint(data, heartbeat=False, ttl_ms=None),
                budget_s=self.remaining_s(),
            )
        except TrackerUnavailable:
            agent.restore_checkpoint(data)
            raise

    # -- writes during the run --------------------------------------------------------------
    async def add_event(self, kind: str, data: Any) -> int:
        """Write one event, retried within the lease; oversized data becomes a marker.

        Known secrets in ``kind`` and ``data`` are masked first."""
        scrub = self.scrub.get()
        kind, data = scrub.text(kind), scrub.data(data)

        async def write(payload: Any) -> int:
            return await self.calls.write(
                "add_event",
                lambda key: self.tracker.add_event(self.ref, kind, payload, idempotency_key=key),
                budget_s=self.remaining_s(),
            )

        try:
            return await write(data)
        except ValidationFailed as exc:
            return await write({"dropped": True, "reason": str(exc)})

    async def add_artifact(self, artifact: ArtifactCreate) -> str:
        """Record an artifact, its kind, uri and metadata scrubbed of known secrets."""
        scrub = self.scrub.get()
        clean = artifact.model_copy(
            update={
                "kind": scrub.text(artifact.kind),
                "uri": scrub.text(artifact.uri),
                "meta": scrub.data(artifact.meta),
            }
        )
        return await self.calls.write(
            "add_artifact",
            lambda key: self.tracker.add_artifact(clean, idempotency_key=key),
            budget_s=self.remaining_s(),
        )

    # -- the final report -------------------------------------------------------------------
    async def transition(
        self,
        trigger: str,
        *,
        expected_stage: str,
        expected_task_version: int,
        instructions: str | None,
        usage: Any,
        budget_s: float,
        wait_for: tuple[str, ...] = (),
        events: Sequence[tuple[str, Any]] = (),
    ) -> TransitionResult:
        """Complete the run and move the task (``InvalidTransition`` keeps the lease).
        ``wait_for``: the task then waits for these tasks (see :mod:`worker.lease.agents`).
        ``events``: the run's last events (kind, data), written first; with the report in one
        item where reports are batched."""
        if instructions is not None or usage is not None:  # else no scrubber is even built
            scrub = self.scrub.get()
            instructions = None if instructions is None else scrub.text(instructions)
            usage = scrub.data(usage)
        reports = self.reports
        if reports is not None and not wait_for:
            body = {
                "trigger": trigger,
                "expected_stage": expected_stage,
                "expected_task_version": expected_task_version,
                "instructions": instructions,
                "usage": usage,
            }
            done = await self.report_batched(events, transition=body, budget_s=budget_s)
            assert done.transition is not None
            return done.transition
        await self.add_events(events)
        if wait_for:
            return await self.calls.write(
                "transition",
                lambda key: self.agent.transition_waiting(
                    trigger,
                    wait_for,
                    expected_stage=expected_stage,
                    expected_task_version=expected_task_version,
                    instructions=instructions,
                    usage=usage,
                    idempotency_key=key,
                ),
                budget_s=budget_s,
            )
        return await self.calls.write(
            "transition",
            lambda key: self.tracker.transition(
                self.ref,
                trigger,
                expected_stage=expected_stage,
                expected_task_version=expected_task_version,
                instructions=instructions,
                usage=usage,
                idempotency_key=key,
            ),
            budget_s=budget_s,
        )

    async def fail(
        self,
        error: str,
        *,
        usage: Any,
        retryable: bool,
        budget_s: float,
        events: Sequence[tuple[str, Any]] = (),
    ) -> FailResult:
        """Fail the run with ``error`` (scrubbed, as is ``usage``); ``events`` as
        :meth:`transition`'s."""
        scrub = self.scrub.get()
        error, usage = scrub.text(error), scrub.data(usage)
        if self.reports is not None:
            body = {"error": error, "usage": usage, "retryable": retryable}
            done = await self.report_batched(events, fail=body, budget_s=budget_s)
            assert done.fail is not None
            return done.fail
        await self.add_events(events)
        return await self.calls.write(
            "fail",
            lambda key: self.tracker.fail(
                self.ref, error, usage=usage, retryable=retryable, idempotency_key=key
            ),
            budget_s=budget_s,
        )

    async def add_events(self, events: Sequence[tuple[str, Any]]) -> None:
        """Write ``events`` (kind, data) one by one, as :meth:`add_event` does."""
        for kind, data in events:
            await self.add_event(kind, data)

    async def report_batched(
        self,
        events: Sequence[tuple[str, Any]],
        *,
        transition: dict[str, Any] | None = None,
        fail: dict[str, Any] | None = None,
        budget_s: float,
    ) -> FinishResult:
        """The final report through the worker's batcher (the session must have one): the
        run's last ``events`` (scrubbed here) and its ``transition`` or ``fail`` (scrubbed by
        the caller) as one item, under this session's retries and key. Events the rail refuses
        (too large) are then written alone, as :meth:`add_event` writes them (a marker), and
        the report sent without them."""
        if not events:
            return await self._finish((), transition, fail, budget_s)
        scrub = self.scrub.get()
        clean = tuple({"kind": scrub.text(k), "data": scrub.data(d)} for k, d in events)
        try:
            return await self._finish(clean, transition, fail, budget_s)
        except ValidationFailed:
            await self.add_events(events)
            return await self._finish((), transition, fail, budget_s)

    async def _finish(
        self,
        events: tuple[dict[str, Any], ...],
        transition: dict[str, Any] | None,
        fail: dict[str, Any] | None,
        budget_s: float,
    ) -> FinishResult:
        """One item through the batcher, under this session's retries and key."""
        reports = self.reports
        assert reports is not None
        ref = self.ref
        return await self.calls.write(
            "transition" if transition is not None else "fail",
            lambda key: reports.finish(
                FinishItem(
                    lease=ref, events=events, transition=transition, fail=fail, idempotency_key=key
                )
            ),
            budget_s=budget_s,
        )

    async def release(self, reason: str, *, budget_s: float) -> ReleaseResult:
        """Give the task back unfinished (the worker shuts down): no attempt is counted."""
        return await self.calls.write(
            "release",
            lambda key: self.tracker.release(self.ref, reason, idempotency_key=key),
            budget_s=budget_s,
        )
