"""What the claim loop has in flight: its slots, one record per running task and one per claim.

The worker's slots are one :class:`anyio.CapacityLimiter` of ``concurrency`` tokens, a token
borrowed for each claim *before* it is sent. A running task's life in the worker is three
steps, each one method of :class:`InFlight` (cf. the one ``_RunningActivity`` record per
activity of Temporal's Python worker):

1. :meth:`InFlight.start`: the claimed run holds its slot (an :class:`anyio.CapacityLimiter`
   token) and a place in its role's ``max_concurrency``;
2. :meth:`InFlight.executed`: its executor returned (or was cancelled). The slot and the place
   go back at once, so the next claim overlaps this run's final report, unless
   :data:`REPORTS_PER_SLOT` times ``concurrency`` reports are already outstanding (the worker
   then holds at most three times ``concurrency`` leases);
3. :meth:`InFlight.finished`: its final report is done; whatever it still holds goes back.

A claim sent to the tracker is an :class:`OpenClaim` until it is answered: its cancel scope
(:meth:`InFlight.stop_claims` cancels it) and, while a request is at the tracker, the shield
that keeps a granted lease from being dropped (a second stop lifts it), and inside it the
scope of a parked claim's wait, which the first stop cancels. Every count the loop
reads (runs executing, per role, reporting) is kept here, in those steps only; the one change
event :meth:`InFlight.next_change` hands out is set when a run finishes or a claim ends.

It touches the slots and the runs' cancel scopes; no tracker, no I/O.
"""

from __future__ import annotations

from collections.abc import KeysView
from dataclasses import dataclass

import anyio

from worker.run import TaskRun

__all__ = ["REPORTS_PER_SLOT", "InFlight", "OpenClaim", "RunningTask"]

#: Final reports outstanding per slot before a run ending keeps its slot until its report
#: lands. Two: a batch's runs then go while the batch before them is still reported, and
#: their own reports wait for it (one in flight at a time, :mod:`worker.lease.batch`); with
#: one, they kept their slots and the next claim waited for the report (on the served rail
#: with its claim ahead, 1.2x the tasks/s and 14 % less worker CPU per task with two,
#: docs/benchmarks.md).
REPORTS_PER_SLOT = 2


@dataclass(eq=False, slots=True)
class RunningTask:
    """One running task, as the claim loop holds it: its role and its slot."""

    role: str
    #: The token its slot was borrowed for.
    slot: object
    #: It still holds its slot and its place in its role's cap (False once they went back at
    #: its executor's return, while it reports).
    holds_slot: bool = True


class OpenClaim:
    """One claim not answered yet: its cancel scope, its request's shield, and the scope of
    its parked claim's wait."""

    __slots__ = ("_parked", "_shield", "scope")

    def __init__(self) -> None:
        #: The claim's scope: :meth:`InFlight.stop_claims` cancels it.
        self.scope = anyio.CancelScope()
        self._shield: anyio.CancelScope | None = None  # its latest request's (one at a time)
        self._parked: anyio.CancelScope | None = None  # its latest parked wait's, if any

    def shield(self) -> anyio.CancelScope:
        """The scope of one request of this claim at the tracker: shielded, since a stop
        arriving mid-claim must not drop a lease the tracker granted (a second stop lifts the
        shield: :meth:`abandon`, and the lease, if any, expires unused)."""
        shield = self._shield = anyio.CancelScope(shield=True)
        return shield

    def parked(self) -> anyio.CancelScope:
        """The scope of a parked claim's wait inside the shield (:mod:`worker.daemon.parking`):
        the first stop cancels it, since a parked claim waits for work, not for a lease the
        tracker granted (cancelling it cancels it at the tracker, which gives back what it
        leased). A stop before it is entered cancels it on entry."""
        parked = self._parked = anyio.CancelScope()
        if self.scope.cancel_called:  # stopped already: the wait ends as soon as it starts
            parked.cancel()
        return parked

    def unpark(self) -> None:
        """End its parked wait, if one is at the tracker: it answers nothing (the tracker
        gives back what it leased); the claim itself is not cancelled."""
        if self._parked is not None:
            self._parked.cancel()

    def stop(self) -> None:
        """Cancel the claim, and its parked wait if one is at the tracker (the first stop)."""
        if self._parked is not None:
            self._parked.cancel()
        self.scope.cancel()

    def abandon(self) -> None:
        """Cancel the claim, its request at the tracker too."""
        shield = self._shield
        if shield is not None:
            shield.shield = False
            shield.cancel()
        self.stop()


class InFlight:
    """The claims and runs in flight (see the module docstring)."""

    def __init__(self, concurrency: int) -> None:
        """``concurrency``: how many slots the worker has."""
        #: The worker's slots: a token per claim and the run it starts.
        self.slots = anyio.CapacityLimiter(concurrency)
        self._concurrency = concurrency
        self._runs: dict[TaskRun, RunningTask] = {}
        self._claims: set[OpenClaim] = set()
        self._busy: dict[str, int] = {}  # runs holding a slot, by role
        self._reporting = 0  # runs whose slot went back at the executor's return
        self._changed: anyio.Event | None = None  # set when a claim or run ends (if awaited)

    def resize(self, concurrency: int) -> None:
        """``concurrency`` slots from now on (a lowered count takes effect as runs end)."""
        self.slots.total_tokens = self._concurrency = concurrency

    # -- runs -------------------------------------------------------------------------------
    @property
    def runs(self) -> KeysView[TaskRun]:
        """The runs in flight."""
        return self._runs.keys()

    @property
    def executing(self) -> int:
        """Runs holding a slot: their executor is running (or they report with the slot kept)."""
        return len(self._runs) - self._reporting

    def busy(self, role: str) -> int:
        """Runs of ``role`` holding a slot (what its ``max_concurrency`` counts)."""
        return self._busy.get(role, 0)

    def start(self, run: TaskRun, role: str, slot: object) -> int:
        """``run`` starts, holding ``slot`` and a place in ``role``'s cap. How many runs are
        in flight now."""
        runs = self._runs
        runs[run] = RunningTask(role, slot)
        self._busy[role] = self._busy.get(role, 0) + 1
        return len(runs)

    def executed(self, run: TaskRun) -> None:
        """``run``'s executor returned: its slot and place go back now, unless
        :data:`REPORTS_PER_SLOT` times ``concurrency`` reports are already outstanding (then
        at :meth:`finished`)."""
        if self._reporting >= REPORTS_PER_SLOT * self._concurrency:
            return
        record = self._runs[run]
        self._reporting += 1
        self._give_back(record)

    def finished(self, run: TaskRun) -> int:
        """``run``'s final report is done: what it still holds goes back. How many runs are
        in flight now."""
        runs = self._runs
        record = runs.pop(run)
        if record.holds_slot:
            self._give_back(record)
        else:
            self._reporting -= 1
        self.notify()
        return len(runs)

    def _give_back(self, record: RunningTask) -> None:
        record.holds_slot = False
        self._busy[record.role] -= 1
        self.slots.release_on_behalf_of(record.slot)

    def cancel_runs(self) -> None:
        """Cancel every run's executor (past the grace); each still makes its final report."""
        for run in list(self._runs):
            run.cancel()

    # -- claims -----------------------------------------------------------------------------
    def open_claim(self) -> OpenClaim:
        """A claim is sent: open until :meth:`close_claim` (:meth:`stop_claims` cancels it)."""
        claim = OpenClaim()
        self._claims.add(claim)
        return claim

    def close_claim(self, claim: OpenClaim) -> None:
        """``claim`` was answered, failed or cancelled."""
        self._claims.discard(claim)

    def stop_claims(self, *, immediate: bool) -> None:
        """Cancel the open claims; ``immediate`` also abandons their requests at the tracker."""
        for claim in self._claims:
            if immediate:
                claim.abandon()
            else:
                claim.stop()

    def unpark(self) -> None:
        """End the open claims' parked waits (the worker's settings changed)."""
        for claim in self._claims:
            claim.unpark()

    # -- changes ----------------------------------------------------------------------------
    def next_change(self) -> anyio.Event:
        """The event the next claim or run to end sets."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def notify(self) -> None:
        """A claim or run ended: wake whoever waits for the next change."""
        # No event while nobody waits: two ends per run would otherwise make two events.
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
