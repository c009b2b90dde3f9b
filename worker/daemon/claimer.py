"""The claim loop: slots, claims, and the runs they start, until stopped, drained or done.

A slot (a :class:`anyio.CapacityLimiter` token) is taken *before* a claim, so the worker never
holds a lease it cannot start; a freed slot claims again at once. A run's slot goes back when
its executor returns, so the next claim overlaps its final report (at most ``concurrency``
reports outstanding so). On a rail with ``claim_many`` every slot free at that moment joins the
claim: one request (one housekeeping pass, one candidate scan) leases for all of them. A slot's
claim and the run it starts share one task. Roles are tried round-robin from the one after the
last winner, so none starves. How many claims overlap, when to idle and whether an empty round
is conclusive is :class:`~worker.daemon.pacing.ClaimPacing`'s to say; with no work the loop
backs off, woken early by the tracker (:class:`~worker.daemon.watch.TrackerWatch`), or on a
rail with ``parked_claim`` sends its next probe as a claim that waits at the tracker for the
back-off's length (:mod:`worker.daemon.parking`), and a
draining worker asks :class:`~worker.daemon.drain.DrainCheck` whether it may exit. What is in
flight (each run's slot and role, each open claim's scopes, the counts read off them) is kept
as one record per run and per claim by :class:`~worker.daemon.running.InFlight`.

A claim already at the tracker when the worker stops completes (it is shielded: a lease the
tracker granted must not be dropped); a second stop lifts the shield, and the lease expires.

It may touch the tracker (claims and their retries, through the
:class:`~worker.daemon.book.SettingsBook`'s :class:`~worker.retry.TrackerCalls`), the slots and
the runs it starts; the worker's life cycle is :mod:`worker.daemon.worker`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, KeysView, Sequence

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from tracker_client.contract.batch_models import MAX_CLAIM_MANY
from tracker_client.errors import TrackerError, TrackerRejected
from tracker_client.models import Lease
from tracker_client.protocol import ClaimsMany, LeaseTracker, Tracker
from worker.config.models import WorkerConfig
from worker.daemon.book import SettingsBook
from worker.daemon.drain import DrainCheck
from worker.daemon.pacing import QUIET_PARK_S, ClaimPacing, ClaimTicket, Step
from worker.daemon.parking import park_claim
from worker.daemon.runners import Runners
from worker.daemon.running import InFlight, OpenClaim
from worker.daemon.values import Claim, Role, Signals, WorkerStats
from worker.daemon.watch import TrackerWatch
from worker.keeper import LeaseKeeper
from worker.lease.clock import loop_clock, loop_time
from worker.progress import ProgressMonitor
from worker.run import TaskRun
from worker.telemetry import NOOP, Telemetry

__all__ = ["Claim", "Claimer", "Signals", "refuses_token", "send_claim"]

log = logging.getLogger("backlog_worker.worker")


class Claimer:
    """Claims for free slots and runs what it claims (see the module docstring)."""

    def __init__(
        self,
        tracker: Tracker,
        config: WorkerConfig,
        roles: Sequence[Role],
        *,
        book: SettingsBook,
        signals: Signals,
        stats: WorkerStats,
        progress: ProgressMonitor,
        keeper: LeaseKeeper,
        watch: TrackerWatch,
        give_up: Callable[[TrackerError], None],
        telemetry: Telemetry = NOOP,
    ) -> None:
        """``book``: each role's run settings, how claims are retried and keyed, and the rail's
        declared parts (``claim_many``), all read once the tracker's capabilities are known;
        ``give_up``: end the worker for an error no retry can fix; ``telemetry``: told of each
        claim and run."""
        self._tracker = tracker
        self._telemetry = telemetry
        #: Telemetry does something (``Telemetry.enabled``, declared by each implementation):
        #: else its per-claim and per-run hooks are not called at all.
        self._observed = telemetry.enabled
        self._config = config
        self._roles = tuple(roles)
        self._book = book
        self._signals = signals
        self._stats = stats
        self._progress = progress
        self._keeper = keeper
        self._watch = watch
        self._give_up = give_up
        #: Claim overlap, idle back-off and when an empty round is conclusive.
        self.pacing = ClaimPacing(
            ClaimPacing.claim_width(config.concurrency), max_tasks=config.max_tasks
        )
        self._drain_check = DrainCheck()
        #: The slots, and the claims and runs in flight: one record each, and their counts.
        self._in_flight = InFlight(config.concurrency)
        self._next_role = 0
        self._refused: dict[str, str] = {}  # roles not claimed for now, and why (logged once)
        self._scope = anyio.CancelScope()  # the loop's, cancelled by stop()
        #: The tasks claims and runs go to (made by :meth:`run`; None before it).
        self.runners: Runners | None = None
        #: How long the next claim waits at the tracker for work (0: it does not): an idle
        #: round's probe on a rail with ``parked_claim`` (:mod:`worker.daemon.parking`).
        self._park_s = 0.0
        self._clock: Callable[[], float] = loop_time  # the running loop's, bound by run()

    @property
    def roles(self) -> tuple[Role, ...]:
        """The roles new claims are made for."""
        return self._roles

    @property
    def runs(self) -> KeysView[TaskRun]:
        """The runs in flight."""
        return self._in_flight.runs

    @property
    def executing(self) -> int:
        """Runs holding a slot: their executor is running (or they report with the slot kept)."""
        return self._in_flight.executing

    # -- control ------------------------------------------------------------------------------
    def reconfigure(self, config: WorkerConfig, roles: Sequence[Role]) -> None:
        """New claims use ``config``'s slots and overlap and ``roles`` (runs keep theirs)."""
        self._config, self._roles, self._next_role = config, tuple(roles), 0
        self._in_flight.resize(config.concurrency)
        self.pacing.width = ClaimPacing.claim_width(config.concurrency)
        # A parked claim waits with the settings it was sent with (up to QUIET_PARK_S): it
        # ends now, and the next park has these.
        self._in_flight.unpark()

    def stop(self, *, immediate: bool) -> None:
        """Claim no more; ``immediate`` also abandons claims still at the tracker."""
        self._scope.cancel()
        self._in_flight.stop_claims(immediate=immediate)

    def cancel_runs(self) -> None:
        """Cancel every run's executor (past the grace); each still makes its final report."""
        self._in_flight.cancel_runs()

    async def wait_idle(self) -> None:
        """Until no claim is outstanding and no run is in flight."""
        in_flight = self._in_flight
        while self.pacing.in_flight or in_flight.runs:
            await in_flight.next_change().wait()

    async def _settled(self) -> None:
        while self.pacing.in_flight:
            await self._in_flight.next_change().wait()

    # -- the loop -------------------------------------------------------------------------------
    async def run(self, runs: TaskGroup) -> None:
        """Claim until stopped, drained or ``max_tasks`` reached (claims and runs go to tasks
        of ``runs``: :class:`~worker.daemon.runners.Runners`, parked between jobs); then wait
        for the claims still out and, unless stopped meanwhile, for the runs to finish."""
        runners = self.runners = Runners(runs)
        self._clock = loop_clock()  # the running loop's, for every run (read once, here)
        try:
            with self._scope:
                await self._loop(runners)
                # Claims still out may yet start runs, and in-flight runs finish normally,
                # unless a stop arrives meanwhile (it cancels this scope and the claims).
                await self.wait_idle()
            await self._settled()  # a stop cancelled them: they end at once
        finally:
            runners.close()  # every claim has ended: no job is handed after this

    async def _loop(self, runners: Runners) -> None:
        pacing, stopping = self.pacing, self._signals.stopping
        while not stopping.is_set():
            step = pacing.next_step()
            if step is Step.STOP:
                break
            if step is Step.SETTLE:
                await self._settled()
                continue
            if step is Step.IDLE:
                if pacing.round_conclusive() and not await self._idle():
                    log.info("queue drained", extra={"action": "drained"})
                    break
                pacing.probe()
                continue
            # Each slot is borrowed on behalf of its own token, so the task that claims and
            # runs with it (not this loop) can hand it back.
            slot = object()
            slots = self._in_flight.slots
            many = self._book.claim_many is not None
            try:
                slots.acquire_on_behalf_of_nowait(slot)
            except anyio.WouldBlock:
                await slots.acquire_on_behalf_of(slot)  # a run ending gives it back
            else:
                if many:
                    # One scheduling pass: the runs ending in this same pass give their slots
                    # back first and join this claim (one claim_many for them all). One lease
                    # per claim claims at once (the loop yields at the latest when ``width``
                    # claims are out: SETTLE).
                    try:
                        await anyio.lowlevel.checkpoint()
                    except BaseException:
                        slots.release_on_behalf_of(slot)
                        raise
            # On a rail with ``claim_many``, every slot free now joins this claim.
            taken = [slot, *self._free_slots()] if many else [slot]
            ticket = pacing.claims_started(len(taken))
            if ticket.first_of_round:
                # A change after this (which the round's claims may miss) ends the next idle
                # wait at once.
                self._watch.forget()
            runners.start(self._claim_and_run, taken, ticket, runners)

    def _free_slots(self) -> list[object]:
        """Every other slot free now (at most what one ``claim_many`` and ``max_tasks`` allow),
        borrowed for one batch claim."""
        room = MAX_CLAIM_MANY - 1
        pacing = self.pacing
        if pacing.max_tasks:
            room = min(room, pacing.max_tasks - pacing.reserved - 1)
        limiter = self._in_flight.slots
        # Read once: only these borrowings change it before the claim is sent (no await).
        slots = [object() for _ in range(int(min(room, limiter.available_tokens)))]
        for slot in slots:
            limiter.acquire_on_behalf_of_nowait(slot)
        return slots

    async def _idle(self) -> bool:
        """After a conclusive empty round: idle (at most until an own retry is due), or False
        when a draining worker may exit."""
        config = self._config
        # A role refused at its cap still has work: no drain yet, and the normal back-off
        # (not a claim right away, which would be refused again: a busy loop).
        draining = config.drain and not self._in_flight.runs and not self._refused
        bound = await self._drain_check.after_empty_round(
            self._tracker, [r.name for r in self._roles], drain=draining
        )
        if bound is None:
            return False
        if bound > 0:
            # Ended early by a change the tracker signals (new work, a lapsed lease), or in
            # drain mode by a run finishing, since its transition may have made work for us.
            also = self._in_flight.next_change() if config.drain else None
            parks = self._book.parked_claim if also is None and self._parks() else None
            if parks is not None:  # the probe that follows waits at the tracker instead
                self._park_s = self.pacing.park_s(
                    config.idle_min_s,
                    config.idle_max_s,
                    bound,
                    quiet=parks.quiet_parks,
                    # a park answers once it ends: within the watchdog's quiet period
                    longest_s=min(QUIET_PARK_S, self._progress.stall_after_s / 2),
                )
            else:
                delay = self.pacing.idle_delay_s(config.idle_min_s, config.idle_max_s, bound)
                await self._watch.wait(delay, also=also)
            self.pacing.idled()
        return True

    def _parks(self) -> bool:
        """Whether an idle round's probe may wait at the tracker (a parked claim): the rail
        declares ``parked_claim`` and one role is claimed for (a claim parked for one role
        would keep another's work waiting)."""
        return self._book.parked_claim is not None and len(self._roles) == 1 and not self._refused

    async def _claim_and_run(
        self, scope: anyio.CancelScope, slots: list[object], ticket: ClaimTicket, runners: Runners
    ) -> None:
        """Claim for ``slots`` (one claim, or one ``claim_many`` for several), then run what was
        claimed: the first lease in this same task (under its ``scope``: the task's, as
        :mod:`~worker.daemon.runners` hands it), the others in tasks of ``runners``.

        The claim runs in a scope of its own that :meth:`stop` cancels (a claim already at the
        tracker completes: it is shielded); the runs do not, they drain as shutdown says.
        """
        claims: list[tuple[Lease, Claim]] = []
        in_flight = self._in_flight
        open_claim = in_flight.open_claim()
        try:
            with open_claim.scope:
                if not self._signals.stopping.is_set():
                    claims = await self._claim_next(open_claim, len(slots))
        finally:
            in_flight.close_claim(open_claim)
            found = len(claims)
            for slot in slots[found:]:  # the slots no lease came for
                in_flight.slots.release_on_behalf_of(slot)
            self.pacing.claims_ended(ticket, sent=len(slots), found=found)
            in_flight.notify()
        if claims:
            drain = self._drain_check
            # (the ids only when an own retry is waited for: nearly never)
            drain.claimed(*[lease.task.id for lease, _ in claims] if drain.own else ())
        for (lease, claim), slot in zip(claims[1:], slots[1:], strict=False):
            runners.start(self._supervise, lease, claim, slot)
        if claims:
            lease, claim = claims[0]
            await self._supervise(scope, lease, claim, slots[0])

    async def _claim_next(self, claim: OpenClaim, want: int) -> list[tuple[Lease, Claim]]:
        """Up to ``want`` leases, each with its claim, roles tried round-robin from the one
        after the last winner."""
        roles = self._roles
        n = len(roles)
        got: list[tuple[Lease, Claim]] = []
        for i in range(n):
            role = roles[(self._next_role + i) % n]
            room = want - len(got)
            cap = role.config.max_concurrency
            if cap is not None:
                room = min(room, cap - self._in_flight.busy(role.name))
            if room <= 0 or self._refuses(role):
                continue
            ttl_ms = int(self._book.for_role(role).lease_ttl_s * 1000)
            try:
                claims = await self._claim_some(claim, role, ttl_ms, room)
            except TrackerError as exc:
                self._telemetry.claim_failed(role.name, exc)
                self._stats.last_error = f"claim {role.name}: {exc}"
                log.error(
                    "claim for role %s failed: %s",
                    role.name,
                    exc,
                    extra={"action": "claim_failed", "role": role.name},
                )
                if refuses_token(exc) or self._config.drain:
                    # Retrying cannot fix a refused token; and a drain that could not ask is
                    # not a drained queue.
                    self._give_up(exc)
                    return got
                continue
            if claims:
                self._next_role = (self._next_role + i + 1) % n
                got.extend(claims)
                if len(got) >= want:
                    break
        return got

    def _refuses(self, role: Role) -> bool:
        """Whether ``role`` gets no claim now (its executor's leftovers are at their cap);
        logged when that starts and when it ends."""
        refusal = role.refusal()
        name = role.name
        if refusal is None:
            if self._refused.pop(name, None) is not None:
                log.info(
                    "role %s: claiming again (below its cap of leftover runs)",
                    name,
                    extra={"action": "role_claims_resumed", "role": name},
                )
            return False
        if name not in self._refused:
            log.warning(
                "role %s: not claiming: %s",
                name,
                refusal,
                extra={"action": "role_claims_refused", "role": name},
            )
        self._refused[name] = refusal
        return True

    async def _claim_some(
        self, claim: OpenClaim, role: Role, ttl_ms: int, n: int
    ) -> list[tuple[Lease, Claim]]:
        """Up to ``n`` leases for ``role``, each with the claim (when it was sent: the leases
        count from then): one ``claim``, or one ``claim_many`` for more than one; empty: no work, or
        stopped. One idempotency key per claim, reused only across retries of it: a lost answer
        then gives back the same leases instead of stranding them."""
        book = self._book
        budget = book.tracker.request_timeout_s * 2
        many = book.claim_many
        parks, park_s, self._park_s = book.parked_claim, self._park_s, 0.0
        agent = self._config.agent_id

        async def attempt(key: str | None) -> list[tuple[Lease, Claim]]:
            leases: list[Lease] = []
            stopping = self._signals.stopping
            if stopping.is_set():
                return []  # no new claim (nor a retry of one) after a stop
            sent_at, started_ns = self._clock(), time.time_ns()
            # Shielded while at the tracker (a second stop lifts it: OpenClaim.abandon); a
            # parked claim ends at the first stop (cancelled at the tracker: parking.py).
            with claim.shield(), self._progress.call("tracker.claim", budget + park_s):
                if park_s and parks is not None:
                    # Nothing in flight to poke: the parked claim is the only wait needed.
                    with self._watch.quiet(not self._in_flight.runs):
                        leases = await park_claim(
                            parks, claim.parked(), agent, role.name, ttl_ms, n, park_s, key
                        )
                    # The lease began when work came: by the answer, less its way here.
                    sent_at = max(sent_at, anyio.current_time() - budget / 2)
                else:
                    leases = await send_claim(self._tracker, many, agent, role.name, ttl_ms, n, key)
                self._progress.tick()  # answered, with or without a task
            ended_ns = time.time_ns()
            if self._observed:  # (a disabled telemetry's hooks do nothing)
                for found in [True] * len(leases) or [False]:  # one per lease, as claims would
                    self._telemetry.claim_answered(
                        role.name, found=found, started_ns=started_ns, ended_ns=ended_ns
                    )
            if not leases:
                return []
            answered = Claim(role, sent_at, started_ns, ended_ns)  # one for the claim's leases
            return [(lease, answered) for lease in leases]

        # A daemon outlives tracker outages; a drain gives up after the report budget.
        claim_budget_s = book.tracker.report_retry_budget_s if self._config.drain else None
        return await book.calls.write("claim", attempt, budget_s=claim_budget_s)

    # -- runs -----------------------------------------------------------------------------------
    async def _supervise(
        self, scope: anyio.CancelScope, lease: Lease, claim: Claim, slot: object
    ) -> None:
        """Run ``lease`` under ``scope`` (its task's: :meth:`TaskRun.execute`) holding ``slot``,
        and count what it ended in."""
        role = claim.role
        name = role.name
        in_flight, stats = self._in_flight, self._stats
        # Positional, in TaskRun's order: CPython 3.11 gathers a class call's keyword arguments
        # into a dict (~450 instructions each), and this runs once per task.
        run = TaskRun(
            self._tracker,
            lease,
            role.config,
            role.executor,
            self._book.for_role(role),
            self._signals.shutdown,
            self._keeper,
            claim.sent_at,
            self._telemetry.run(
                lease, name, claim_started_ns=claim.started_ns, claim_ended_ns=claim.ended_ns
            )
            if self._observed
            else None,
            in_flight.executed,
            self._clock,
        )
        stats.in_flight = in_flight.start(run, name, slot)
        stats.claimed += 1
        stats.by_role[name] = stats.by_role.get(name, 0) + 1
        try:
            result = await run.execute(scope)
            if result.landed:
                self._progress.tick()  # the report landed: a round trip that worked
            stats.count(result)
            if result.retry_at_ms is not None:  # a fail that scheduled a retry
                self._drain_check.failed(lease.task.id, result.retry_at_ms)
        except Exception as exc:  # a bug in our own reporting must not take the worker down
            stats.last_error = f"run {lease.run.id}: {exc}"
            log.exception("run crashed", extra={"action": "run_crashed"})
        finally:
            stats.in_flight = in_flight.finished(run)
            self.pacing.run_finished()


def refuses_token(exc: TrackerError) -> bool:
    """Whether ``exc`` is the tracker refusing the worker's api token (401/403 on a claim)."""
    return isinstance(exc, TrackerRejected) and exc.code in ("unauthorized", "forbidden")


async def send_claim(
    tracker: LeaseTracker,
    many: ClaimsMany | None,
    agent: str,
    role: str,
    ttl_ms: int,
    n: int,
    key: str | None,
) -> list[Lease]:
    """Up to ``n`` leases for ``role`` in one request: ``claim``, or ``many``'s ``claim_many``
    for more than one (the claimer asks for several only where the rail declares it)."""
    if n > 1 and many is not None:
        return await many.claim_many(agent, role, ttl_ms, n, idempotency_key=key)
    lease = await tracker.claim(agent, role, ttl_ms, idempotency_key=key)
    return [] if lease is None else [lease]
