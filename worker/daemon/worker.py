"""The worker daemon: its life cycle, the task group it runs, and the staged shutdown.

:meth:`Worker.run` waits for the tracker (a tracker that is down at start-up is waited out),
reads its :class:`~tracker_client.capabilities.Capabilities` once (and from them the parts of the
rail its runs use: :class:`~tracker_client.protocol.RailParts`, never a probe of the tracker),
and then runs one task group:
the :class:`~worker.keeper.LeaseKeeper` (heartbeats and flushes of every run), the
:class:`~worker.daemon.watch.TrackerWatch` (the tracker's wake-ups), the maintenance loop and
the :class:`~worker.daemon.claimer.Claimer` (claims and the runs they start).

Shutdown is staged (docs/guarantees/worker.md): :meth:`Worker.stop` stops claiming (no claim is sent
after it); in-flight runs keep heartbeating for ``shutdown_grace_s``; then their executors are
cancelled and each run makes a shielded final report (a release, reason ``worker_shutdown``). A
second stop skips the grace and abandons claims still at the tracker.

It may touch the tracker (``ping`` and ``capabilities`` at start, with retries), the workdir base
(:mod:`worker.workdirs`: the run directories a killed worker left are swept at start) and the
rooms it runs; claims are the claimer's, signals and systemd the CLI's (:mod:`worker.cli.run`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence

import anyio
from anyio.abc import TaskStatus

from tracker_client.errors import TrackerError, TrackerUnavailable, Unsupported
from tracker_client.protocol import LeaseTracker, RailParts, Tracker
from worker.config.models import TrackerConfig, WorkerConfig
from worker.daemon.book import SettingsBook
from worker.daemon.claimer import Claimer, Signals
from worker.daemon.presence import Presence
from worker.daemon.values import Role, WorkerState, WorkerStats
from worker.daemon.watch import TrackerWatch
from worker.keeper import LeaseKeeper
from worker.lease.batch import batcher_for
from worker.progress import ProgressMonitor
from worker.retry import call_with_retry
from worker.telemetry import NOOP, Telemetry, WorkerView
from worker.workdirs import prepare_workdir_base, sweep_stale_workdirs

__all__ = ["Worker", "maintenance_loop"]

log = logging.getLogger("backlog_worker.worker")


class Worker:
    """Claims tasks for its roles and runs each through :class:`~worker.run.TaskRun`."""

    def __init__(
        self,
        tracker: Tracker,
        config: WorkerConfig,
        roles: Sequence[Role],
        *,
        tracker_config: TrackerConfig | None = None,
        on_state: Callable[[WorkerState], None] | None = None,
        telemetry: Telemetry = NOOP,
    ) -> None:
        """``on_state`` is called on every state change (the CLI's systemd notifications);
        ``telemetry``: the worker's metrics and traces (:func:`worker.telemetry.setup.build`)."""
        if not roles:
            raise ValueError("a worker needs at least one role")
        self.tracker = tracker
        self.config = config
        self.state = WorkerState.STARTING
        self.stats = WorkerStats()
        #: The error that ended the worker (the tracker refused its token; in drain mode, any
        #: claim that failed for good), or None. The CLI exits non-zero naming it.
        self.error: TrackerError | None = None
        self._on_state = on_state
        self.telemetry = telemetry
        tc = tracker_config or TrackerConfig()
        # Per user, 0700 and ours unless configured (ConfigError: the worker does not start).
        self._book = SettingsBook(config, tc, prepare_workdir_base(config.workdir), telemetry)
        self._signals = Signals(anyio.Event(), anyio.Event(), anyio.Event())
        self._startup_scope = anyio.CancelScope()
        self._keeper = LeaseKeeper()
        self._watch = TrackerWatch(tracker, poke=self._keeper.poke)
        #: Progress of claims, heartbeats and reports, for the systemd watchdog (see healthy).
        self.progress = ProgressMonitor(stall_after_s=self._progress_budget_s(roles))
        #: The claim loop and the runs it started (its ``pacing`` says how it claims); the
        #: roles new claims are made for are its.
        self.claimer = Claimer(
            tracker,
            config,
            roles,
            book=self._book,
            signals=self._signals,
            stats=self.stats,
            progress=self.progress,
            keeper=self._keeper,
            watch=self._watch,
            give_up=self._give_up,
            telemetry=telemetry,
        )
        #: The worker's entry in the rail's worker list (``backlog-worker workers``).
        self.presence = Presence(tracker, self)

    # -- public control -----------------------------------------------------------------------
    @property
    def roles(self) -> tuple[Role, ...]:
        """The roles new claims are made for."""
        return self.claimer.roles

    def set_roles(self, roles: Sequence[Role]) -> None:
        """Replace the roles for new claims (config reload); in-flight runs keep theirs."""
        if not roles:
            raise ValueError("a worker needs at least one role")
        self._reconfigured(roles)

    def set_config(self, config: WorkerConfig) -> None:
        """Apply a reloaded ``[worker]`` section to new claims: slots (a lowered count takes
        effect as runs end), lease TTL, idling, grace, run directories. The caller keeps the
        keys that need a restart (see :mod:`worker.config.reload`) at their running values."""
        base = prepare_workdir_base(config.workdir)  # a refused base changes nothing
        self.config = config
        self._book.update(config=config, workdir_base=base)
        self._reconfigured(self.roles)

    def _reconfigured(self, roles: Sequence[Role]) -> None:
        self._book.update()
        self.claimer.reconfigure(self.config, roles)
        self.progress.stall_after_s = self._progress_budget_s(roles)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (a further stop skips the grace)."""
        return self._signals.stopping.is_set()

    def stop(self, *, immediate: bool = False) -> None:
        """Begin the staged shutdown. Idempotent; a second call or ``immediate`` skips the grace
        and abandons claims still at the tracker (a lease one of them got expires unused)."""
        signals = self._signals
        immediate = immediate or signals.stopping.is_set()
        if immediate:
            signals.skip_grace.set()
        signals.stopping.set()
        signals.shutdown.set()
        self._startup_scope.cancel()
        self.claimer.stop(immediate=immediate)

    def healthy(self) -> bool:
        """The watchdog probe: True while the worker makes progress (:meth:`progress_problem`)."""
        return self.progress_problem() is None

    def progress_problem(self) -> str | None:
        """Why the worker looks wedged, or None. Progress is a tracker round trip that worked:
        a claim answered (with or without a task), a run's report landed (both ticked by the
        claimer; a run lost to a hung tracker is not progress), a heartbeat answered (read off
        each run's lease). None within the budget, or a claim stuck past its own, is a
        problem; retries of a failing call are not progress."""
        if self.state is not WorkerState.RUNNING:
            return None  # starting and stopping never withhold the watchdog
        monitor = self.progress
        now = monitor.clock()
        for run in self.claimer.runs:
            # When the tracker last confirmed the run's lease (claim or heartbeat answered).
            monitor.tick(at=now - run.lease_confirmed_ago_s())
        return monitor.problem()

    def _progress_budget_s(self, roles: Sequence[Role]) -> float:
        # The longest legitimate quiet period: a lease TTL (a heartbeat every TTL/3, retried
        # within the lease), a few idle rounds, a couple of request timeouts.
        ttl = max(self._book.lease_ttl_s(r) for r in roles)
        return max(ttl, 3 * self.config.idle_max_s, 2 * self._book.tracker.request_timeout_s)

    # -- main loop ----------------------------------------------------------------------------
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until stopped (or drained / ``max_tasks`` reached). Signals readiness once the
        tracker has answered."""
        # A tracker that is down at start-up is waited out, but a stop still ends the wait.
        with self._startup_scope:
            retry = self._book.retry
            # ping, not health: health counts every task the rail keeps (a cost that grows
            # with retention) and builds its answer's model; "health" stays the log's name.
            await call_with_retry(self.tracker.ping, policy=retry, budget_s=None, action="health")
            caps = await call_with_retry(
                self.tracker.capabilities, policy=retry, budget_s=None, action="capabilities"
            )
        if self._startup_scope.cancelled_caught or self.stopping:
            self._set_state(WorkerState.STOPPED)
            task_status.started()
            return
        if not self.config.keep_workdirs:  # what a killed worker left (live runs' are held)
            await anyio.to_thread.run_sync(sweep_stale_workdirs, self._book.workdir_base)
        # The lease ceiling, the key rule and whether reports can be batched are known now.
        parts = RailParts.declared(self.tracker, caps)
        self._book.update(
            capabilities=caps, reports=batcher_for(self.tracker, caps.extensions), parts=parts
        )
        self._reconfigured(self.roles)
        self._set_state(WorkerState.RUNNING)
        task_status.started()
        log.info(
            "worker %s running: roles %s, %d slots",
            self.config.agent_id,
            ", ".join(r.name for r in self.roles),
            self.config.concurrency,
            extra={"action": "worker_started"},
        )
        self.telemetry.attach(
            WorkerView(
                tracker=self.tracker,
                slots=lambda: (self.claimer.executing, self.config.concurrency),
                roles=lambda: [r.name for r in self.roles],
                agent_id=self.config.agent_id,
                abandoned_threads=self._abandoned_threads,
            )
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.telemetry.serve)
            tg.start_soon(self.presence.run, caps)
            await tg.start(self._keeper.run)
            await tg.start(self._watch.run)
            tg.start_soon(
                maintenance_loop, self.tracker, self.stats, self.config.maintenance_interval_s
            )
            async with anyio.create_task_group() as runs:
                await self.claimer.run(runs)
                self._set_state(WorkerState.DRAINING)
                self._signals.shutdown.set()
                await self._drain()
            tg.cancel_scope.cancel()
        await self.presence.goodbye()  # stopped, not lost (bounded, never raises)
        with anyio.CancelScope(shield=True):
            await self.telemetry.aclose()  # the last spans, before the process exits
        self._set_state(WorkerState.STOPPED)
        log.info("worker stopped: %s", self.stats.summary(), extra={"action": "worker_stopped"})

    def _abandoned_threads(self) -> dict[str, int]:
        """Role -> threads of its cancelled runs still running (the metric's reading)."""
        counts: dict[str, int] = {}
        for role in self.roles:
            found = role.leftovers()
            if found is not None:
                counts[role.name] = found[0]
        return counts

    def _set_state(self, state: WorkerState) -> None:
        self.state = state
        if self._on_state is not None:
            self._on_state(state)

    async def _drain(self) -> None:
        """In-flight runs get the grace (a second stop ends it), then their executors are
        cancelled; every run still makes its final report."""
        claimer = self.claimer
        if claimer.runs:
            log.info(
                "draining %d in-flight task(s), grace %.1fs",
                len(claimer.runs),
                self.config.shutdown_grace_s,
                extra={"action": "drain_start"},
            )
            with anyio.move_on_after(self.config.shutdown_grace_s):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_cancel_when, self._signals.skip_grace, tg.cancel_scope)
                    await claimer.wait_idle()
                    tg.cancel_scope.cancel()
            claimer.cancel_runs()
        await claimer.wait_idle()

    def _give_up(self, exc: TrackerError) -> None:
        """End the worker because of ``exc`` (kept in :attr:`error` for the exit code)."""
        if self.error is None:
            self.error = exc
            log.error("stopping: %s", exc, extra={"action": "worker_gave_up"})
        self.stop()


async def maintenance_loop(tracker: LeaseTracker, stats: WorkerStats, interval_s: float) -> None:
    """Call ``tracker.maintenance()`` every ``interval_s`` (jittered) until cancelled; returns
    when the tracker has none (a remote server reclaims expired leases itself on claim)."""
    while True:
        await anyio.sleep(interval_s * random.uniform(0.8, 1.2))
        try:
            report = await tracker.maintenance()
        except Unsupported:
            return
        except TrackerUnavailable as exc:
            stats.last_error = f"maintenance: {exc}"
            continue
        except TrackerError as exc:
            log.error("maintenance failed: %s", exc, extra={"action": "maintenance_failed"})
            continue
        if report.expired_leases or report.expired_tasks or report.crash_looped:
            log.info(
                "maintenance: %d expired lease(s), %d expired task(s), %d crash-looped",
                report.expired_leases,
                report.expired_tasks,
                report.crash_looped,
                extra={"action": "maintenance"},
            )


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
