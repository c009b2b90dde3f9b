"""One claimed task: the executor supervised under its lease, then the final report.

The shape (docs/architecture/index.md, "One task's path"):

1. The executor runs in the run's own task while the worker's :class:`~worker.keeper.LeaseKeeper`
   heartbeats the lease every ttl/3 and flushes buffered reports (one keeper task for all runs,
   instead of two loops per run). A heartbeat that says the lease is gone cancels the executor
   at once and nothing more is written for the run. The lease running out by the worker's own
   clock (:mod:`worker.lease.clock`: its confirmed end), even while a heartbeat hangs
   unanswered, cancels the executor too; but the tracker may still hold the lease (the hung
   heartbeat may have landed, and a plain NullTickets heartbeat grants 300 s), so the run is
   then handed back (``lease_expired``) rather than abandoned
   (docs/guarantees/stalled-tracker.md). Whether a heartbeat is sent and what its answer does
   is decided in one place, :meth:`LeaseSession.heartbeat <worker.lease.LeaseSession.heartbeat>`.
2. A per-task timeout (``metadata.timeout_s`` or the role's ``timeout_s``) cancels the executor
   and fails the run with reason ``timeout`` (:mod:`plugins.supervise`, shared with the
   plugin test harness).
3. The outcome is reported under a shield (:class:`~worker.run.report.FinalReport`). The
   keeper's heartbeats stop when the executor ends (on NullTickets each one resets the lease to
   300 s, so a worker killed mid-report would strand the task that long); the report heartbeats
   only when it is still retrying as the lease nears its end, and stops when the tracker can
   no longer hold the lease by our clock.

Every call under the lease goes through the run's :class:`~worker.lease.LeaseSession`;
:class:`TaskRun` itself supervises the executor: its context, its workdir, its time limit, the
kill deadline of its processes.

It may touch the executor (through :mod:`plugins.supervise`), its processes' kill deadline
(:mod:`plugins.proc.process`), the run's workdir (:mod:`worker.workdirs`) and the keeper; the
tracker only through the session and the report, but for one read: the instructions of the
transition that led the task to its stage (:func:`instructions_for`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from plugins.api import ExecutionContext, Executor, Failure, Outcome
from plugins.context_hooks import ContextHooks
from plugins.proc.guard import kill_deadline
from plugins.supervise import call_executor, timeout_of
from tracker_client.agent_models import Upstream
from tracker_client.errors import TrackerError, Unsupported, ValidationFailed
from tracker_client.models import ArtifactCreate, Lease, StoreEntry
from tracker_client.protocol import LeaseTracker
from worker.config.models import RoleConfig
from worker.keeper import LeaseKeeper
from worker.lease import LeaseSession
from worker.lease.clock import loop_time
from worker.run.log import RunLog
from worker.run.report import LEASE_EXPIRED, SHUTDOWN, FinalReport
from worker.run.settings import RunResult, RunSettings
from worker.telemetry import RunTelemetry
from worker.workdirs import default_workdir_base, remove_workdir, workdir_name

if TYPE_CHECKING:
    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import Event

__all__ = ["SessionSink", "TaskRun", "instructions_for"]

log = logging.getLogger("backlog_worker.worker")

#: The telemetry of a run given none (the no-op base: its hooks are skipped).
_NO_TELEMETRY = RunTelemetry()

#: Page size when reading a task's transitions for the instructions that led to its stage.
TRANSITIONS_PAGE = 1000


async def instructions_for(tracker: LeaseTracker, lease: Lease, page_size: int) -> str | None:
    """The instructions of the transition that led the task to its stage (None for new tasks,
    or when it got there another way, e.g. a requeue)."""
    if lease.task.task_version <= 1:
        return None
    last: Event | None = None
    cursor: str | None = None
    try:
        while True:  # a task's transitions are few; pages only for very long histories
            page = await tracker.list_task_events(
                lease.task.id, limit=page_size, cursor=cursor, kind="transition"
            )
            if page.items:
                last = page.items[-1]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    except (TrackerError, NotImplementedError):
        return None
    if last is None or not isinstance(last.data, Mapping):
        return None
    if last.data.get("to") != lease.task.stage:
        return None
    value = last.data.get("instructions")
    return value if isinstance(value, str) and value else None


class SessionSink:
    """The executor's :class:`~plugins.api.ContextSink` and :class:`~plugins.agent.AgentSink`:
    writes under the run's lease, the agent calls through the session's
    :class:`~worker.lease.agents.AgentCalls`."""

    def __init__(self, session: LeaseSession) -> None:
        """Write through ``session`` (its keys, retry budget and scrubbing)."""
        self._session = session

    async def emit_events(self, events: list[tuple[str, Any]]) -> None:
        """Write events in order."""
        for kind, data in events:
            await self._session.add_event(kind, data)

    async def emit_artifact(self, artifact: ArtifactCreate) -> str:
        """Record an artifact."""
        return await self._session.add_artifact(artifact)

    async def store_get(self, namespace: str, key: str) -> Any:
        """The value under the key, or None."""
        return await self._session.agent.store_get(namespace, key)

    async def store_put(self, namespace: str, key: str, value: Any) -> None:
        """Upsert a JSON value."""
        await self._session.agent.store_put(namespace, key, value)

    async def store_delete(self, namespace: str, key: str) -> None:
        """Delete a key."""
        await self._session.agent.store_delete(namespace, key)

    async def store_list(self, namespace: str) -> list[StoreEntry]:
        """A namespace's entries."""
        return await self._session.agent.store_list(namespace)

    async def store_search(
        self, query: str, *, namespace: str | None, limit: int
    ) -> list[StoreEntry]:
        """The rail's full-text search."""
        return await self._session.agent.store_search(query, namespace=namespace, limit=limit)

    async def spawn(self, pipeline: str, fields: Mapping[str, Any]) -> str:
        """Create a subtask of the run's task."""
        return await self._session.agent.spawn(pipeline, fields)

    async def save_checkpoint(self, data: Any) -> None:
        """Keep the checkpoint; the keeper writes the latest (see :mod:`worker.lease.agents`)."""
        self._session.agent.keep_checkpoint(data)

    async def read_upstream(self) -> list[Upstream]:
        """The task's dependencies as they ended."""
        return await self._session.agent.read_upstream()


class TaskRun:
    """Supervises one claimed task's executor from the claim to the final report."""

    __slots__ = (
        "_hooks",
        "_keeper",
        "_log",
        "_observed",
        "_on_executed",
        "_scope",
        "_shutdown",
        "_stopped",
        "_tracker",
        "executor",
        "flush_interval_s",
        "heartbeat_interval_s",
        "role",
        "session",
        "settings",
        "telemetry",
    )

    def __init__(
        self,
        tracker: LeaseTracker,
        lease: Lease,
        role: RoleConfig,
        executor: Executor,
        settings: RunSettings,
        shutdown: anyio.Event,
        keeper: LeaseKeeper,
        claimed_at: float | None = None,
        telemetry: RunTelemetry | None = None,
        on_executed: Callable[[TaskRun], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``claimed_at``: ``anyio.current_time()`` when the claim request was sent (default:
        now); the lease's end by our clock counts from there. ``telemetry``: the run's span and
        metrics (none by default). ``on_executed``: called once the executor has returned (or
        been cancelled), before the final report is sent: the worker frees the run's slot there,
        so the next claim overlaps this report. ``clock``: the running loop's, when the caller
        holds it (:func:`~worker.lease.clock.loop_clock`: the claim loop passes its own).

        The claim loop passes them positionally: calling a class with keyword arguments makes a
        dict of them on CPython 3.11 (~450 instructions each), once per task; so do the run's
        own objects below (docs/benchmarks.md)."""
        self._log = RunLog.for_lease(log, lease, role.name)
        self.session = settings.session(
            tracker, lease, claimed_at=claimed_at, log=self._log, clock=clock
        )
        self.role = role
        self.executor = executor
        self.settings = settings
        #: The session's (:attr:`LeaseSession.heartbeat_interval_s`): a third of the TTL (read
        #: by the keeper: plain attributes, as those of the session and the settings are).
        self.heartbeat_interval_s = self.session.heartbeat_interval_s
        #: How often buffered reports are written when the executor doesn't flush itself.
        self.flush_interval_s = settings.report_flush_s
        self._tracker = tracker
        self._shutdown = shutdown
        self._keeper = keeper
        self._hooks: ContextHooks | None = None  # the run's context's reports and workdir
        self._scope: anyio.CancelScope | None = None  # the executor's, while it runs
        self._stopped = False  # cancel() was called
        self.telemetry = telemetry or _NO_TELEMETRY
        #: The telemetry does something (not the no-op base): else its hooks are skipped.
        self._observed = type(self.telemetry) is not RunTelemetry
        self._on_executed = on_executed

    @property
    def lease(self) -> Lease:
        """The claimed lease (its task and run)."""
        return self.session.lease

    def lease_remaining_s(self) -> float:
        """Seconds the lease is still ours (by our own clock, less the safety margin)."""
        return self.session.remaining_s()

    def lease_confirmed_ago_s(self) -> float:
        """Seconds since the tracker last confirmed the lease (the claim or heartbeat answered,
        counted from when it was sent): the watchdog's progress of a busy run."""
        return loop_time() - self.session.clock.confirmed_at

    # -- the run --------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Cancel the executor (shutdown past its grace), at once or, before it starts, as it
        starts; the final report still happens. Once the executor is done it leaves the run
        be."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    def execute(self, scope: anyio.CancelScope) -> Coroutine[Any, Any, RunResult]:
        """The run, whole (a coroutine to await): the executor under heartbeats, then the final
        report. Never raises for task problems.

        ``scope``: the caller's cancel scope, entered, with no deadline, not shielded nor
        cancelled (a runner task's: :mod:`worker.daemon.runners`). The run makes it its own
        while it lasts: the lease's clock moves its deadline and cancels it, :meth:`cancel`
        cancels it, the final report shields it. The run hands it back as it came unless it
        was cancelled: then it is spent (anyio's scopes cannot be un-cancelled), and the caller
        must leave it before awaiting anything else (the run's report went in a scope of its
        own).

        One coroutine does it all (:meth:`_run`), so each time the run's task resumes (its
        hand-off, its report's batch answered) the wake-up passes through one frame of the run,
        not a chain of methods that only forward (docs/benchmarks.md)."""
        if not self._observed:  # the no-op telemetry: no span, no timing
            return self._run(scope)
        return self._run_observed(scope)

    async def _run_observed(self, scope: anyio.CancelScope) -> RunResult:
        started = time.time_ns()
        with self.telemetry as obs:
            result = await self._run(scope)
            obs.finished(result, duration_ns=time.time_ns() - started)
        return result

    async def _run(self, scope: anyio.CancelScope) -> RunResult:
        session = self.session
        lease = session.lease
        # Each read once: a field of the rail's (pydantic) models is an unspecialised
        # attribute load through the model's ``__getattr__`` hook (~400 instructions).
        task, run = lease.task, lease.run
        first_version = task.task_version <= 1
        instructions = None
        if not first_version:  # else there is no transition to read
            instructions = await instructions_for(self._tracker, lease, TRANSITIONS_PAGE)
        self._log.claimed()
        # Named after the run id (unique; hashed when it is not one safe path component),
        # created only if the executor asks for it.
        workdir = self.settings.workdir_of(workdir_name(run.id))
        hooks: ContextHooks | None = None
        try:
            if first_version and run.attempt <= 1 and lease.previous_checkpoint is None:
                previous, upstream = None, None  # as _agent_inputs answers: no call needed
            else:
                previous, upstream = await self._agent_inputs()
            hooks = ContextHooks(SessionSink(session), workdir, self.settings.report_policy)
            limit_s = timeout_of(task, self.role.timeout_s)
            ctx = ExecutionContext(  # (positional, as the run's own objects are built)
                task,
                run,
                hooks,
                self.role.options,  # options
                instructions,
                None if limit_s is None else anyio.current_time() + limit_s,  # deadline
                self._shutdown,  # shutdown
                self._log,  # logger
                self.telemetry.traceparent,  # traceparent
                previous,  # previous_checkpoint
                upstream,
            )
            # Heartbeats and periodic flushes come from the worker's keeper, until the report is
            # done (after the executor, the session's heartbeat sends one only when the report
            # needs it: LeaseSession.heartbeat, the whole heartbeat decision).
            self._hooks = hooks
            keeper = self._keeper
            keeper.add(self)
            try:
                outcome: Outcome | None = None
                clock = session.clock
                report = FinalReport(session, self._tracker, self.role, self.settings, self._log)
                # The scope's deadline is the lease's end by our clock (moved by each heartbeat
                # that got through); a heartbeat that finds the lease gone cancels it at once.
                # The scope is the runner task's (entered before, left after): a cancellation of
                # it is caught here, where leaving a scope of the run's own would catch it.
                cancelled = anyio.get_cancelled_exc_class
                clock.watch(scope)
                try:
                    self._scope = scope
                    if self._stopped:  # the worker's stop came before the executor started
                        scope.cancel()
                    # its processes get SIGKILL before the lease ends, whatever their grace
                    bound = kill_deadline.set(self._kill_by)
                    try:
                        if self._observed:
                            with self.telemetry.phase("executor"):
                                outcome = await call_executor(self.executor, ctx, limit_s)
                        else:
                            outcome = await call_executor(self.executor, ctx, limit_s)
                    except cancelled():
                        if not scope.cancel_called:
                            raise  # an outer scope's, not the run's
                    except BaseExceptionGroup as group:
                        if not scope.cancel_called:
                            raise
                        # The run's cancellation in a group beside the executor's own errors:
                        # taken out, the rest raised (the run crashed), as leaving a scope of
                        # the run's own did.
                        rest = group.split(cancelled())[1]
                        if rest is not None:
                            raise rest  # noqa: B904 (the group is its context, as anyio's)
                    finally:
                        kill_deadline.reset(bound)
                        self._scope = None  # a stop from now on leaves the run be
                    if not scope.cancel_called:
                        # The executor returned and nothing cancelled it: the same scope goes
                        # on as the report's (shielded, the report's deadline:
                        # LocalLease.to_report), one scope per run instead of two.
                        ended = self._executed(outcome)
                        if isinstance(ended, RunResult):
                            return ended
                        clock.to_report(scope)
                        try:
                            return await self._reported(report.send_within(hooks, ended))
                        except cancelled():
                            if not scope.cancel_called:
                                raise
                            # the report's deadline passed, or the tracker took the lease
                            return report.dropped()
                finally:
                    clock.release(scope)
                # Cancelled (the lease's end or loss, or the worker's stop): the scope is spent
                # (its runner task ends after this run) and the report gets one of its own.
                ended = self._executed(outcome)
                if isinstance(ended, RunResult):
                    return ended
                return await self._reported(report.send(hooks, ended))
            finally:
                keeper.remove(self)
        finally:
            if hooks is not None and hooks.workdir_created:  # (else nothing to remove nor hold)
                if not self.settings.keep_workdirs:
                    with anyio.CancelScope(shield=True):
                        await remove_workdir(workdir, self._workdir_base())
                hooks.release_workdir()

    async def _agent_inputs(self) -> tuple[Any, list[Upstream] | None]:
        """What the rail hands the run: the previous attempts' checkpoint (no read where the
        claim carries it) and, at a later stage (the task moved, maybe waiting on subtasks),
        its upstream. A read that fails is logged; the run goes on without it."""
        lease = self.lease
        first = lease.previous_checkpoint is None and lease.run.attempt <= 1
        if first and lease.task.task_version <= 1:
            return None, None  # a new task's first run: nothing to read
        previous: Any = None
        upstream: list[Upstream] | None = None
        agent = self.session.agent
        try:
            previous = await agent.previous_checkpoint()
            if lease.task.task_version > 1:
                upstream = await agent.upstream_at_start()
        except TrackerError as exc:
            self._log.warning(
                "could not read the run's checkpoint or upstream: %s",
                exc,
                extra={"action": "agent_inputs_failed"},
            )
        return previous, upstream

    def _executed(self, outcome: Outcome | None) -> Outcome | RunResult:
        """The run's end after its executor: the slot goes back; then what the final report
        says (the executor's outcome, or why it was stopped), or the run's result when the
        lease is gone and nothing is reported."""
        self.session.work_ended()
        if self._on_executed is not None:
            self._on_executed(self)
        # Gone: the tracker said so, or can no longer hold it even if a hung heartbeat landed.
        lost = self.session.check_expired()
        if lost is not None:
            self._log.warning(
                "lease lost (%s): executor cancelled, nothing reported",
                lost.code,
                extra={"action": "lease_lost"},
            )
            return RunResult("lost", lost.code)
        if outcome is not None:
            return outcome
        if self.session.expired() and not self._shutdown.is_set():
            # Stopped at the lease's confirmed end: the tracker may still hold the lease (a
            # hung heartbeat may have landed), so the task is handed back, not abandoned.
            return Failure(
                reason=LEASE_EXPIRED,
                message="no heartbeat got through before the lease's end by the worker's clock",
                retryable=True,
            )
        # cancelled by the worker's shutdown
        return Failure(
            reason=SHUTDOWN,
            message="the worker shut down before the task finished",
            retryable=True,
        )

    def _reported(self, send: Awaitable[RunResult]) -> Awaitable[RunResult]:
        """The final report ``send``, in the run's trace phase ``report`` when observed."""
        if not self._observed:
            return send
        return self._observed_phase(send)

    async def _observed_phase(self, send: Awaitable[RunResult]) -> RunResult:
        with self.telemetry.phase("report"):
            return await send

    def _workdir_base(self) -> Path:
        # The worker passes its prepared base; a TaskRun built without one uses the same default.
        return self.settings.workdir_base or default_workdir_base()[0]

    def _kill_by(self) -> float:
        """When the run's processes must be dead: half the safety margin before the lease ends."""
        clock = self.session.clock
        return clock.expires_at - clock.margin_s / 2

    # -- kept by the worker's LeaseKeeper ------------------------------------------------------
    def has_pending_reports(self) -> bool:
        """Whether the executor's context holds reports not written yet (or a checkpoint that
        is due before the next heartbeat)."""
        if self._hooks is None:
            return False
        return self._hooks.has_buffered_reports or self.session.checkpoint_due()

    async def flush_once(self) -> bool:
        """Write buffered reports, so a quiet executor's last events don't wait for the end of
        the run. False (stop flushing this run) when the tracker refused them."""
        if self._hooks is None:
            return True
        try:
            # Shielded: cancelling a flush halfway would lose the batch it took.
            with anyio.CancelScope(shield=True), self.telemetry.within():
                await self._hooks.flush()
                if self.session.checkpoint_due():
                    await self._flush_checkpoint()
        except TrackerError as exc:
            self._log.warning(
                "could not write reports: %s", exc, extra={"action": "report_flush_failed"}
            )
            return False
        return True

    async def heartbeat_once(self) -> bool:
        """The session's heartbeat (:meth:`LeaseSession.heartbeat`: whether one is sent, and
        what its answer does), in the run's trace. False: stop heartbeating this run."""
        with self.telemetry.within():  # the keeper's task: make the run current for its trace
            return await self.session.heartbeat()

    async def _flush_checkpoint(self) -> None:
        """Write a pending checkpoint now; one the rail refuses is logged and dropped."""
        try:
            await self.session.flush_checkpoint()
        except (ValidationFailed, Unsupported) as exc:
            self._log.warning(
                "checkpoint not written: %s", exc, extra={"action": "checkpoint_failed"}
            )
