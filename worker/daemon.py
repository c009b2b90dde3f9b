"""The worker daemon: slots, the claim loop, maintenance, lifecycle and staged shutdown.

A slot (a :class:`anyio.CapacityLimiter` token) is taken *before* a claim, so the worker never
holds a lease it cannot start; a freed slot claims again at once. Roles are tried round-robin
from the one after the last winner, so none starves. With no work the loop backs off
exponentially with jitter, but wakes early when the tracker signals a change (new work, a lapsed
lease; the worker's one :class:`~worker.daemon_parts.TrackerWatch`, which also makes the
:class:`~worker.keeper.LeaseKeeper` heartbeat every lease at once, so a cancel is seen). A
slot's claim and the run it starts share one task.

Shutdown is staged (DESIGN.md invariant 4): :meth:`Worker.stop` stops claiming (no claim is sent
after it); in-flight runs keep heartbeating for ``shutdown_grace_s``; then their executors are
cancelled and each run makes a shielded final report (``fail``, reason ``worker_shutdown``). A
second stop skips the grace and abandons claims still at the tracker.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Sequence

import anyio
from anyio.abc import TaskStatus

from tracker_client.errors import TrackerError
from tracker_client.models import Lease
from tracker_client.protocol import Tracker
from worker.config import TrackerConfig, WorkerConfig
from worker.daemon_drain import DrainCheck, idle_delay_s
from worker.daemon_parts import (
    Role,
    TrackerWatch,
    WorkerState,
    WorkerStats,
    instructions_for,
    lease_ttl_s,
    maintenance_loop,
    refuses_token,
    stalled,
)
from worker.keeper import LeaseKeeper
from worker.retry import RetryPolicy, call_with_retry, idempotency_keys_needed
from worker.run import RunSettings, TaskRun
from worker.sdnotify import ProgressMonitor
from worker.workdirs import prepare_workdir_base

__all__ = ["Role", "Worker", "WorkerState", "WorkerStats"]

log = logging.getLogger("backlog_worker.worker")

#: Page size when reading a task's transitions for the instructions that led to its stage.
TRANSITIONS_PAGE = 1000


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
    ) -> None:
        if not roles:
            raise ValueError("a worker needs at least one role")
        self.tracker = tracker
        self.config = config
        # Per user, 0700 and ours unless configured (ConfigError: the worker does not start).
        self._workdir_base = prepare_workdir_base(config.workdir)
        self._roles: tuple[Role, ...] = tuple(roles)
        tc = tracker_config or TrackerConfig()
        self._retry = RetryPolicy(initial_s=tc.retry_initial_s, max_s=tc.retry_max_s)
        self._report_budget_s = tc.report_retry_budget_s
        self._on_state = on_state
        self.state = WorkerState.STARTING
        self.stats = WorkerStats()
        self._slots = anyio.CapacityLimiter(config.concurrency)
        self._role_busy: dict[str, int] = {}
        self._next_role = 0
        self._runs: set[TaskRun] = set()
        self._keeper = LeaseKeeper()
        self._keys = idempotency_keys_needed(tracker)
        self._run_settings: dict[str, RunSettings] = {}
        self._all_idle = anyio.Event()
        self._all_idle.set()
        self._stopping = anyio.Event()
        self._shutdown = anyio.Event()  # seen by executors through ctx.shutting_down
        self._skip_grace = anyio.Event()
        self._claim_scope = anyio.CancelScope()
        self._startup_scope = anyio.CancelScope()
        self._run_done = anyio.Event()
        self._claims_reserved = 0  # claims made or in flight (for max_tasks)
        self._claiming = 0  # claims in flight
        self._claim_scopes: set[anyio.CancelScope] = set()  # theirs, cancelled by stop()
        self._parallel_claims = max(1, min(config.concurrency, 4))
        self._claim_cap = 1
        self._idle_round = 0
        self._settled = anyio.Event()
        self._found_no_work = False
        self._drain_check = DrainCheck()
        self._finished_gen = 0  # runs finished so far
        self._empty_seen_gen = 0  # _finished_gen when the last empty claim began
        self._claim_shields: set[anyio.CancelScope] = set()  # claims at the tracker now
        self._request_timeout_s = tc.request_timeout_s
        self._watch = TrackerWatch(tracker, poke=self._keeper.poke)
        #: The error that ended the worker (the tracker refused its token; in drain mode, any
        #: claim that failed for good), or None. The CLI exits non-zero naming it.
        self.error: TrackerError | None = None
        #: Progress of claims, heartbeats and reports, for the systemd watchdog (see healthy).
        self.progress = ProgressMonitor(stall_after_s=self._progress_budget_s())

    # -- public control -----------------------------------------------------------------------
    @property
    def roles(self) -> tuple[Role, ...]:
        """The roles new claims are made for."""
        return self._roles

    def set_roles(self, roles: Sequence[Role]) -> None:
        """Replace the roles for new claims (config reload); in-flight runs keep theirs."""
        if not roles:
            raise ValueError("a worker needs at least one role")
        self._roles = tuple(roles)
        self._run_settings.clear()
        self._next_role = 0
        self.progress.stall_after_s = self._progress_budget_s()

    def set_config(self, config: WorkerConfig) -> None:
        """Apply a reloaded ``[worker]`` section to new claims: slots (a lowered count takes
        effect as runs end), lease TTL, idling, grace, run directories. The caller keeps the
        keys that need a restart (see :mod:`worker.reload`) at their running values."""
        base = prepare_workdir_base(config.workdir)  # a refused base changes nothing
        self.config, self._workdir_base = config, base
        self._slots.total_tokens = config.concurrency
        self._parallel_claims = max(1, min(config.concurrency, 4))
        self._run_settings.clear()
        self.progress.stall_after_s = self._progress_budget_s()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (a further stop skips the grace)."""
        return self._stopping.is_set()

    def stop(self, *, immediate: bool = False) -> None:
        """Begin the staged shutdown. Idempotent; a second call or ``immediate`` skips the grace
        and abandons claims still at the tracker (a lease one of them got expires unused)."""
        if self._stopping.is_set() or immediate:
            self._skip_grace.set()
            for shield in self._claim_shields:
                shield.shield = False
                shield.cancel()
        self._stopping.set()
        self._shutdown.set()
        self._startup_scope.cancel()
        self._claim_scope.cancel()
        for scope in self._claim_scopes:
            scope.cancel()

    def healthy(self) -> bool:
        """The watchdog probe: True while the worker makes progress (:meth:`progress_problem`)."""
        return self.progress_problem() is None

    def progress_problem(self) -> str | None:
        """Why the worker looks wedged, or None (see :func:`~worker.daemon_parts.stalled`)."""
        if self.state is not WorkerState.RUNNING:
            return None  # starting and stopping never withhold the watchdog
        return stalled(self.progress, self._runs)

    def _progress_budget_s(self) -> float:
        # The longest legitimate quiet period: a lease TTL (a heartbeat every TTL/3, retried
        # within the lease), a few idle rounds, a couple of request timeouts.
        ttl = max([self._lease_ttl_s(r) for r in self._roles])
        return max(ttl, 3 * self.config.idle_max_s, 2 * self._request_timeout_s)

    # -- main loop ----------------------------------------------------------------------------
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until stopped (or drained / ``max_tasks`` reached). Signals readiness once the
        tracker has answered."""
        # A tracker that is down at start-up is waited out, but a stop still ends the wait.
        with self._startup_scope:
            await call_with_retry(
                self.tracker.health, policy=self._retry, budget_s=None, action="health"
            )
        if self._startup_scope.cancelled_caught or self._stopping.is_set():
            self._set_state(WorkerState.STOPPED)
            task_status.started()
            return
        self._set_state(WorkerState.RUNNING)
        task_status.started()
        log.info(
            "worker %s running: roles %s, %d slots",
            self.config.agent_id,
            ", ".join(r.name for r in self._roles),
            self.config.concurrency,
            extra={"action": "worker_started"},
        )
        async with anyio.create_task_group() as runs, anyio.create_task_group() as background:
            await background.start(self._keeper.run)
            await background.start(self._watch.run)
            interval = self.config.maintenance_interval_s
            background.start_soon(maintenance_loop, self.tracker, self.stats, interval)
            with self._claim_scope:
                await self._claim_loop(runs)
                # Drained or max_tasks reached: claims still out may yet start runs, and
                # in-flight runs finish normally, unless a stop arrives meanwhile (it cancels
                # this scope and the claims).
                await self._claims_settled()
                await self._all_idle.wait()
            await self._claims_settled()  # a stop cancelled them: they end at once
            self._set_state(WorkerState.DRAINING)
            self._shutdown.set()
            await self._drain()
            background.cancel_scope.cancel()
        self._set_state(WorkerState.STOPPED)
        log.info("worker stopped: %s", self.stats.summary(), extra={"action": "worker_stopped"})

    def _set_state(self, state: WorkerState) -> None:
        self.state = state
        if self._on_state is not None:
            self._on_state(state)

    async def _drain(self) -> None:
        if self._runs:
            log.info(
                "draining %d in-flight task(s), grace %.1fs",
                len(self._runs),
                self.config.shutdown_grace_s,
                extra={"action": "drain_start"},
            )
            with anyio.move_on_after(self.config.shutdown_grace_s):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._wait_skip_grace, tg.cancel_scope)
                    await self._all_idle.wait()
                    tg.cancel_scope.cancel()
            for run in list(self._runs):
                run.cancel()
        await self._all_idle.wait()

    async def _wait_skip_grace(self, scope: anyio.CancelScope) -> None:
        await self._skip_grace.wait()
        scope.cancel()

    async def _claim_loop(self, runs: anyio.abc.TaskGroup) -> None:
        """Take a slot, then claim for it; several claims may be in flight at once.

        A claim costs a tracker round trip, so claiming one task at a time would cap the
        worker at one task per round trip whatever its concurrency. Up to
        ``_parallel_claims`` claims overlap while work flows. The first claim that finds no
        work stops new claims; once the outstanding ones settle the loop idles (one waiter,
        backing off, woken early by the tracker) and then probes with a single claim, widening
        again only when that one finds work: an idle worker makes one claim per round.
        """
        max_tasks = self.config.max_tasks
        while not self._stopping.is_set():
            if max_tasks and self._claims_reserved >= max_tasks:
                break
            if self._found_no_work:
                await self._claims_settled()
                if self._found_no_work:
                    # Drained only if no run finished since that empty claim began: a
                    # run's fail or transition may have made work that claim could not see.
                    stale = self._empty_seen_gen != self._finished_gen
                    if not stale:
                        bound = await self._drain_check.after_empty_round(
                            self.tracker,
                            [r.name for r in self._roles],
                            drain=self.config.drain and not self._runs,
                        )
                        if bound is None:
                            log.info("queue drained", extra={"action": "drained"})
                            break
                        if bound > 0:
                            await self._idle_wait(self._idle_round, bound)
                            self._idle_round += 1  # back off further until a claim finds work
                    self._found_no_work = False
                    self._claim_cap = 1  # probe with one claim; widen once one finds work
                    continue
            if self._claiming >= self._claim_cap:
                await self._claims_settled()
                continue  # what the settled claims found decides the next step (idle or not)
            # Each slot is borrowed on behalf of its own token, so the task that claims and
            # runs with it (not this loop) can hand it back.
            slot = object()
            await self._slots.acquire_on_behalf_of(slot)
            self._claims_reserved += 1
            if self._claiming == 0:
                self._settled = anyio.Event()
                # A change after this (which the round's claims may miss) ends the next idle
                # wait at once.
                self._watch.forget()
            self._claiming += 1
            runs.start_soon(self._claim_and_run, slot)

    async def _claims_settled(self) -> None:
        """Wait until no claim is outstanding."""
        if self._claiming:
            await self._settled.wait()

    async def _claim_and_run(self, slot: object) -> None:
        """Claim for ``slot``, then run what was claimed in this same task.

        The claim runs in a scope of its own that :meth:`stop` cancels (a claim already at the
        tracker completes: it is shielded); the run does not, it drains as shutdown says.
        """
        generation = self._finished_gen
        claimed: tuple[Lease, Role, float] | None = None
        scope = anyio.CancelScope()
        self._claim_scopes.add(scope)
        try:
            with scope:
                if not self._stopping.is_set():
                    claimed = await self._claim_next()
        finally:
            self._claim_scopes.discard(scope)
            self._claiming -= 1
            if claimed is None:
                self._slots.release_on_behalf_of(slot)
                self._claims_reserved -= 1
            if self._claiming == 0:
                self._settled.set()
        if claimed is None:
            self._found_no_work = True
            self._empty_seen_gen = generation
            return
        self._found_no_work = False
        self._claim_cap = self._parallel_claims
        self._idle_round = 0
        lease, role, sent_at = claimed
        self._drain_check.claimed(lease.task.id)
        await self._supervise(self._start_run(lease, role, sent_at), role, slot)

    async def _idle_wait(self, idle_round: int, bound_s: float = math.inf) -> None:
        """Back off (``bound_s``: at most that long, e.g. until a retry is due)."""
        delay = min(
            idle_delay_s(self.config.idle_min_s, self.config.idle_max_s, idle_round), bound_s
        )
        self._run_done = anyio.Event()
        # Ended early by a change the tracker signals (new work, a lapsed lease), or in drain
        # mode by a run finishing, since its transition may have made work for us.
        await self._watch.wait(delay, also=self._run_done if self.config.drain else None)

    async def _claim_next(self) -> tuple[Lease, Role, float] | None:
        roles = self._roles
        n = len(roles)
        for i in range(n):
            role = roles[(self._next_role + i) % n]
            cap = role.config.max_concurrency
            if cap is not None and self._role_busy.get(role.name, 0) >= cap:
                continue
            ttl_ms = int(self._lease_ttl_s(role) * 1000)
            try:
                got = await self._claim_one(role, ttl_ms)
            except TrackerError as exc:
                self.stats.last_error = f"claim {role.name}: {exc}"
                log.error(
                    "claim for role %s failed: %s",
                    role.name,
                    exc,
                    extra={"action": "claim_failed", "role": role.name},
                )
                if refuses_token(exc) or self.config.drain:
                    # Retrying cannot fix a refused token; and a drain that could not ask is
                    # not a drained queue.
                    self._give_up(exc)
                    return None
                continue
            if got is not None:
                self._next_role = (self._next_role + i + 1) % n
                return got[0], role, got[1]
        return None

    async def _claim_one(self, role: Role, ttl_ms: int) -> tuple[Lease, float] | None:
        """A lease for ``role`` (with when its claim was sent: the lease counts from then), or
        None (no work, or stopped)."""
        # One idempotency key per claim attempt, reused only across retries of that attempt: a
        # lost answer then gives back the same lease instead of stranding it.
        key = str(uuid.uuid4()) if self._keys else None

        async def attempt() -> tuple[Lease, float] | None:
            lease: Lease | None = None
            if self._stopping.is_set():
                return None  # no new claim (nor a retry of one) after a stop
            # Shielded: a stop arriving mid-claim must not drop a lease the tracker granted;
            # a second stop lifts the shield (stop()) and the lease, if any, expires unused.
            shield = anyio.CancelScope(shield=True)
            self._claim_shields.add(shield)
            try:
                sent_at = anyio.current_time()
                with shield, self.progress.call("tracker.claim", 2 * self._request_timeout_s):
                    lease = await self.tracker.claim(
                        self.config.agent_id, role.name, ttl_ms, idempotency_key=key
                    )
                    self.progress.tick()  # answered, with or without a task
            finally:
                self._claim_shields.discard(shield)
            return None if lease is None else (lease, sent_at)

        # A daemon outlives tracker outages; a drain gives up after the report budget.
        return await call_with_retry(
            attempt,
            policy=self._retry,
            budget_s=self._report_budget_s if self.config.drain else None,
            action="claim",
        )

    def _give_up(self, exc: TrackerError) -> None:
        """End the worker because of ``exc`` (kept in :attr:`error` for the exit code)."""
        if self.error is None:
            self.error = exc
            log.error("stopping: %s", exc, extra={"action": "worker_gave_up"})
        self.stop()

    def _lease_ttl_s(self, role: Role) -> float:
        return lease_ttl_s(self.tracker, role.config.lease_ttl_s or self.config.lease_ttl_s)

    def _settings_for(self, role: Role) -> RunSettings:
        """The run settings of ``role`` (built once per role and configuration)."""
        settings = self._run_settings.get(role.name)
        if settings is None:
            settings = RunSettings(
                lease_ttl_s=self._lease_ttl_s(role),
                retry=self._retry,
                report_retry_budget_s=self._report_budget_s,
                workdir_base=self._workdir_base,
                keep_workdirs=self.config.keep_workdirs,
                report_flush_s=self.config.report_flush_s,
                idempotency_keys=self._keys,
            )
            self._run_settings[role.name] = settings
        return settings

    def _start_run(self, lease: Lease, role: Role, sent_at: float) -> TaskRun:
        run = TaskRun(
            tracker=self.tracker,
            lease=lease,
            role=role.config,
            executor=role.executor,
            settings=self._settings_for(role),
            shutdown=self._shutdown,
            keeper=self._keeper,
            claimed_at=sent_at,
        )
        self._runs.add(run)
        self._all_idle = anyio.Event()
        self._role_busy[role.name] = self._role_busy.get(role.name, 0) + 1
        self.stats.claimed += 1
        self.stats.in_flight = len(self._runs)
        self.stats.by_role[role.name] = self.stats.by_role.get(role.name, 0) + 1
        return run

    async def _supervise(self, run: TaskRun, role: Role, slot: object) -> None:
        try:
            run._instructions = await instructions_for(self.tracker, run.lease, TRANSITIONS_PAGE)
            result = await run.execute()
            self.stats.count(result)
            self._drain_check.failed(run.lease.task.id, result.retry_at_ms)
        except Exception as exc:  # a bug in our own reporting must not take the worker down
            self.stats.last_error = f"run {run.lease.run.id}: {exc}"
            log.exception("run crashed", extra={"action": "run_crashed"})
        finally:
            self.progress.tick()
            self._runs.discard(run)
            self._finished_gen += 1
            self._role_busy[role.name] -= 1
            self.stats.in_flight = len(self._runs)
            self._slots.release_on_behalf_of(slot)
            self._run_done.set()
            if not self._runs:
                self._all_idle.set()
