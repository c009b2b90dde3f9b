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
heartbeat.

Two decisions are made here, each in one method that reads top to bottom:

* :meth:`LeaseSession.heartbeat`: whether a heartbeat is sent, and what its answer does (the
  lease extended; gone, so every scope under it is cancelled; or not confirmed in time, so the
  work stops and the report still tries). When: every :attr:`LeaseSession.heartbeat_interval_s`
  (the keeper's schedule, :mod:`worker.keeper`), and at once when the rail signals a change.
  The request itself is :meth:`LeaseSession._send_heartbeat`.
* :meth:`LeaseSession._report`: which request carries a run's final transition or fail: one
  item of the worker's ``finish_many`` batch (:mod:`worker.lease.batch`), one ``finish`` (a
  fail with its ``error`` event, all or nothing), or the events one by one and then the
  ``transition`` or ``fail``. What the outcome is (transition, fail or release) is the run's
  report's (:mod:`worker.run.report`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, overload

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
from worker.lease.clock import LocalLease, loop_clock
from worker.retry import TrackerCalls
from worker.scrub import RunScrubber

__all__ = ["LeaseSession"]

_LOG = logging.getLogger("backlog_worker.worker")


class LeaseSession:
    """The lease of one claimed task, from the claim to the last write under it."""

    __slots__ = (
        "_agent",
        "_log",
        "_scrub",
        "_work_ended",
        "calls",
        "clock",
        "heartbeat_interval_s",
        "lease",
        "lost",
        "parts",
        "ref",
        "reports",
        "tracker",
        "ttl_s",
        "unconfirmed",
    )

    def __init__(
        self,
        tracker: LeaseTracker,
        lease: Lease,
        calls: TrackerCalls,
        ttl_s: float,
        claimed_at: float | None = None,
        reports: ReportBatcher | None = None,
        heartbeat_grant_s: float | None = None,
        parts: RailParts | None = None,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger] = _LOG,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``claimed_at``: ``anyio.current_time()`` when the claim request was sent (default:
        now); the lease's end by our clock counts from there. ``reports``: the worker's batcher
        of final reports (None: each report is its own call). ``heartbeat_grant_s``: what a
        heartbeat of this tracker grants whatever TTL it asks (300 s on a plain NullTickets
        server; None: the TTL asked). ``parts``: the whole rail and the extensions it declared,
        chosen at the worker's start (None: a lease seam only, no store or task calls).
        ``log``: where what the rail refused along the way is logged (the run's log).
        ``clock``: the running loop's (:func:`~worker.lease.clock.loop_clock`), when the caller
        holds it. (The run's settings pass them positionally, as :class:`~worker.run.TaskRun`
        is built: no dict of keyword arguments per run.)"""
        self.tracker = tracker
        self.reports = reports
        self.parts = parts
        #: The claimed lease: its task and run, for the executor's context and the log.
        self.lease = lease
        #: What lease operations are sent (ids and token, no task).
        self.ref: LeaseRef = lease.ref
        self.calls = calls
        self.ttl_s = ttl_s
        #: When :meth:`heartbeat` is called (the keeper's schedule): every third of the TTL, so
        #: two heartbeats may fail before the lease runs out.
        self.heartbeat_interval_s = ttl_s / 3
        #: The lease's end on our monotonic clock; scopes doing work under it follow it.
        now = loop_clock() if clock is None else clock
        self.clock = LocalLease(  # (positional: as the session itself is built)
            ttl_s,
            now() if claimed_at is None else claimed_at,
            lease.expires_at_ms,
            heartbeat_grant_s,
            now,
        )
        #: Why the lease is gone (the tracker said so, or it ran out by our clock), or None.
        self.lost: LeaseLost | None = None
        self._scrub: RunScrubber | None = None
        self._agent: AgentCalls | None = None
        #: A heartbeat gave up before the confirmed end: the work was stopped.
        self.unconfirmed = False
        self._work_ended = False  # the executor is done: the lease is kept for the report only
        self._log = log

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

    # -- keeping the lease: the heartbeat decision ------------------------------------------
    def work_ended(self) -> None:
        """The executor is done: from now on the lease is kept for the final report only."""
        self._work_ended = True

    async def heartbeat(self) -> bool:
        """The heartbeat decision, whole: whether to send one, and what its answer does. Called
        every :attr:`heartbeat_interval_s` and when the rail signals a change (the keeper's
        schedule). False to stop heartbeating: the lease is gone or could not be confirmed."""
        clock = self.clock
        if self._work_ended and clock.remaining_s() >= self.ttl_s / 2:
            # After the executor, the report needs no heartbeat while half the lease is left: a
            # quick report sends none (on NullTickets each one would reset the lease to 300 s);
            # one still retrying gets one with at least a sixth of the TTL to spare.
            return True
        sent = anyio.current_time()
        clock.heartbeat_sent()
        try:
            expires_ms = await self._send_heartbeat()
        except LeaseLost as exc:
            # The tracker's answer: the lease is gone. Every scope watching the clock is
            # cancelled, the report's too: nothing more may be written under it.
            self.lost = exc
            clock.unanswered()
            clock.cancel_all()
            return False
        except TrackerUnavailable:
            # Not confirmed before the confirmed end (the retries ran out of the lease's time):
            # someone else may hold the task soon, so the work stops; the report still tries
            # until the latest end the tracker may hold (the heartbeat may have landed:
            # :mod:`worker.lease.clock`).
            self.unconfirmed = True
            clock.cancel_work()
            clock.unanswered()
            return False
        except BaseException:
            clock.unanswered()  # given up or cancelled: it may have landed
            raise
        clock.extended(sent, expires_ms)
        return True

    async def _send_heartbeat(self) -> int:
        """One heartbeat, retried while the lease is confirmed, carrying the pending checkpoint;
        the lease's end as the tracker answered it (epoch ms). A checkpoint the rail refuses is
        logged and dropped (the heartbeat sent without it), one not sent is kept for the next
        try."""
        ttl_ms = int(self.ttl_s * 1000)
        agent = self._agent
        data = agent.take_checkpoint() if agent is not None else UNSET
        if agent is not None and data is not UNSET:
            try:
                expires: int = await self.calls.read(
                    "heartbeat",
                    lambda: agent.write_checkpoint(data, heartbeat=True, ttl_ms=ttl_ms),
                    budget_s=self.remaining_s(),
                )
                return expires
            except (ValidationFailed, Unsupported) as exc:
                self._log.warning(
                    "checkpoint not written: %s", exc, extra={"action": "checkpoint_failed"}
                )
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

    # -- the final report: which request carries it -----------------------------------------
    def transition(
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
    ) -> Coroutine[Any, Any, TransitionResult]:
        """Complete the run and move the task (``InvalidTransition`` keeps the lease): a
        coroutine to await (:meth:`_report`'s own: no frame of this method in the report's
        chain, which each wake-up of the run passes through).
        ``wait_for``: the task then waits for these tasks (see :mod:`worker.lease.agents`).
        ``events``: the run's last events (kind, data), written first; with the report in one
        item where reports are batched."""
        if instructions is not None or usage is not None:  # else no scrubber is even built
            scrub = self.scrub.get()
            instructions = None if instructions is None else scrub.text(instructions)
            usage = scrub.data(usage)
        body = {
            "trigger": trigger,
            "expected_stage": expected_stage,
            "expected_task_version": expected_task_version,
            "instructions": instructions,
            "usage": usage,
        }
        return self._report(events, transition=body, wait_for=wait_for, budget_s=budget_s)

    def fail(
        self,
        error: str,
        *,
        usage: Any,
        retryable: bool,
        budget_s: float,
        events: Sequence[tuple[str, Any]] = (),
        event: tuple[str, Any] | None = None,
    ) -> Coroutine[Any, Any, FailResult]:
        """Fail the run with ``error`` (scrubbed, as is ``usage``); ``events`` as
        :meth:`transition`'s (a coroutine to await, as it is). ``event``: the failure's own
        event (kind, data), written with the fail all or nothing where the rail has ``finish``
        or reports are batched."""
        scrub = self.scrub.get()
        body = {"error": scrub.text(error), "usage": scrub.data(usage), "retryable": retryable}
        return self._report(events, fail=body, event=event, budget_s=budget_s)

    @overload
    async def _report(
        self,
        events: Sequence[tuple[str, Any]],
        *,
        transition: dict[str, Any],
        wait_for: tuple[str, ...],
        budget_s: float,
    ) -> TransitionResult: ...

    @overload
    async def _report(
        self,
        events: Sequence[tuple[str, Any]],
        *,
        fail: dict[str, Any],
        event: tuple[str, Any] | None,
        budget_s: float,
    ) -> FailResult: ...

    async def _report(
        self,
        events: Sequence[tuple[str, Any]],
        *,
        transition: dict[str, Any] | None = None,
        wait_for: tuple[str, ...] = (),
        fail: dict[str, Any] | None = None,
        event: tuple[str, Any] | None = None,
        budget_s: float,
    ) -> TransitionResult | FailResult:
        """The one place a final report's request is chosen, for its ``transition`` or its
        ``fail`` (bodies scrubbed by the caller), under this session's retries and key:

        1. ``finish_many``: where the worker batches reports (the rail declared it) and the
           task waits on nothing, one item of the worker's batch holds the run's last
           ``events`` (scrubbed here), the failure's ``event`` and the report;
        2. ``finish``: a fail with its ``event``, where the rail has it, is one write (the
           ``events`` before it written first);
        3. otherwise the events one by one (:meth:`add_event`: scrubbed, an oversized one a
           marker), then ``transition`` (waiting on ``wait_for``: :mod:`worker.lease.agents`)
           or ``fail``.

        Event data a path refuses (too large) falls to the next path, where it becomes a
        marker. A release is not a report of this kind: :meth:`release`."""
        if self.reports is not None and not wait_for:
            last = events if event is None else (*events, event)
            if not last:
                done = await self._finish((), transition, fail, budget_s)
            else:
                scrub = self.scrub.get()
                clean = tuple({"kind": scrub.text(k), "data": scrub.data(d)} for k, d in last)
                try:
                    done = await self._finish(clean, transition, fail, budget_s)
                except ValidationFailed:  # too large: written alone (a marker), then the report
                    await self.add_events(last)
                    done = await self._finish((), transition, fail, budget_s)
            answer = done.transition if transition is not None else done.fail
            assert answer is not None
            return answer
        if events:
            await self.add_events(events)
        finisher = self.parts.finish if self.parts is not None else None
        if event is not None and fail is not None and finisher is not None:
            scrub = self.scrub.get()
            one = {"kind": scrub.text(event[0]), "data": scrub.data(event[1])}
            try:
                finished = await self.calls.write(
                    "fail",
                    lambda key: finisher.finish(
                        self.ref, events=[one], fail=fail, idempotency_key=key
                    ),
                    budget_s=budget_s,
                )
                assert finished.fail is not None
                return finished.fail
            except ValidationFailed:
                pass  # the event's data, refused: written alone below, as a marker
        if event is not None:
            await self.add_event(*event)
        if fail is not None:
            return await self.calls.write(
                "fail",
                lambda key: self.tracker.fail(self.ref, idempotency_key=key, **fail),
                budget_s=budget_s,
            )
        assert transition is not None
        if wait_for:
            return await self.calls.write(
                "transition",
                lambda key: self.agent.transition_waiting(
                    wait_for=wait_for, idempotency_key=key, **transition
                ),
                budget_s=budget_s,
            )
        return await self.calls.write(
            "transition",
            lambda key: self.tracker.transition(self.ref, idempotency_key=key, **transition),
            budget_s=budget_s,
        )

    async def add_events(self, events: Sequence[tuple[str, Any]]) -> None:
        """Write ``events`` (kind, data) one by one, as :meth:`add_event` does."""
        for kind, data in events:
            await self.add_event(kind, data)

    def _finish(
        self,
        events: tuple[dict[str, Any], ...],
        transition: dict[str, Any] | None,
        fail: dict[str, Any] | None,
        budget_s: float,
    ) -> Coroutine[Any, Any, FinishResult]:
        """One item through the batcher, under this session's retries and key (the call's
        coroutine itself: no frame of its own in the report's chain)."""
        reports = self.reports
        assert reports is not None
        ref = self.ref
        return self.calls.write(
            "transition" if transition is not None else "fail",
            lambda key: reports.finish(
                # (lease, events, transition, fail, idempotency_key: positional, as the run's
                # objects are built)
                FinishItem(ref, events, transition, fail, key)
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
