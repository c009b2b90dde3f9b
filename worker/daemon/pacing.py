"""How fast the worker claims: how many claims overlap, when it idles, when a round says "empty".

A claim costs a tracker round trip, so claiming one task at a time would cap the worker at one
task per round trip whatever its concurrency. Up to ``width`` claims overlap while work flows.
The first claim that finds no work stops new claims; once the outstanding ones settle the loop
idles (backing off, woken early by the tracker) and then probes with a single claim, widening
again only when that one finds work: an idle worker makes one claim per round.

An empty round is *conclusive* only if no run finished since the empty claim began: a run's
fail or transition may have made work that claim could not see, so the loop probes again at
once instead of idling (or, draining, exiting).

:class:`ClaimPacing` is a pure object: no I/O, no clock, randomness injected. The claim loop
(:mod:`worker.daemon.claimer`) asks it :meth:`~ClaimPacing.next_step` and tells it what each
claim found.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["MAX_WIDTH", "QUIET_PARK_S", "ClaimPacing", "ClaimTicket", "Step", "idle_delay_s"]

#: The most claims that overlap while work flows (a worker of many slots on a plain server).
MAX_WIDTH = 32
#: The longest an idle worker's parked claim waits where parks are quiet
#: (:attr:`~tracker_client.protocol.ParksClaims.quiet_parks`), when ``idle_max_s`` is shorter:
#: such a park answers as soon as work comes, whether by a wake-up or by time (a delayed task,
#: a retry or a lapsing lease coming due), so its length costs no pickup latency, and each
#: park that ends empty costs the rail a round of writes (docs/benchmarks/costs.md).
QUIET_PARK_S = 30.0


class Step(enum.Enum):
    """What the claim loop does next."""

    #: Send one more claim (a slot first).
    CLAIM = "claim"
    #: Wait until no claim is outstanding, then ask again.
    SETTLE = "settle"
    #: The round found no work and every claim settled: idle (or end a drain), then probe.
    IDLE = "idle"
    #: ``max_tasks`` tasks were claimed (none is still being claimed): claim no more.
    STOP = "stop"


class ClaimTicket(NamedTuple):
    """One claim in flight: the runs finished when it began, and whether it began a round."""

    finished_before: int
    first_of_round: bool


def idle_delay_s(
    idle_min_s: float,
    idle_max_s: float,
    idle_round: int,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """The idle back-off of round ``idle_round``: the ceiling doubles from ``idle_min_s`` up to
    ``idle_max_s``, with "equal jitter" (between half the ceiling and the ceiling), so an idle
    worker at the ceiling probes about once per 0.75 x ``idle_max_s``, never in a burst."""
    ceiling = min(idle_max_s, idle_min_s * (2**idle_round))
    low = max(idle_min_s, ceiling / 2)
    return uniform(low, max(low, ceiling))


class ClaimPacing:
    """The claim loop's counters and the decisions read off them (see the module docstring)."""

    def __init__(
        self,
        width: int,
        *,
        max_tasks: int = 0,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        """``width``: claims that may overlap while work flows; ``max_tasks``: claims in all
        (0: no limit); ``uniform``: the jitter's random source."""
        self.width = width
        self.max_tasks = max_tasks
        #: Idle rounds since a claim last found work (the back-off grows with it).
        self.idle_round = 0
        #: Claims made or in flight (what ``max_tasks`` counts).
        self.reserved = 0
        #: Claims in flight.
        self.in_flight = 0
        self._uniform = uniform
        self._cap = 1  # claims allowed in flight now: 1 while probing, ``width`` once work flows
        self._found_no_work = False
        self._finished = 0  # runs finished so far
        self._empty_seen = 0  # runs finished when the last empty claim began

    @staticmethod
    def claim_width(concurrency: int) -> int:
        """The overlap for ``concurrency`` slots: one per slot, at most :data:`MAX_WIDTH`.

        On a plain NullTickets server a claim leases one task, so the worker claims as fast
        as its slots free only when each slot may have its own claim out: with four at most,
        ten slots of no-op work got 0.46 of a minimal client's throughput (bench.wire). Where
        claims batch (``claim_many``) the slots free together join one claim anyway."""
        return max(1, min(concurrency, MAX_WIDTH))

    def next_step(self) -> Step:
        """What the loop does now."""
        if self.max_tasks and self.reserved >= self.max_tasks:
            # The budget is reserved by the claims in flight too; it is spent only once they
            # found their tasks. An empty one gives its share back: the loop settles first,
            # then claims again (a worker stopped here while its claims came back empty would
            # exit having run fewer than ``max_tasks``, or none on an empty queue).
            return Step.SETTLE if self.in_flight else Step.STOP
        if self._found_no_work:
            return Step.SETTLE if self.in_flight else Step.IDLE
        if self.in_flight >= self._cap:
            return Step.SETTLE  # what the settled claims find decides the next step
        return Step.CLAIM

    def claim_started(self) -> ClaimTicket:
        """A claim is sent; its ticket goes back in :meth:`claim_ended`."""
        return self.claims_started(1)

    def claims_started(self, n: int) -> ClaimTicket:
        """``n`` claims are sent together (one ``claim_many`` for ``n`` slots): one ticket for
        them all, given back once in :meth:`claims_ended` (as ``n`` of :meth:`claim_started`
        would be, but for the ticket's objects: the claims share when they began)."""
        in_flight = self.in_flight
        self.reserved += n
        self.in_flight = in_flight + n
        return ClaimTicket(self._finished, first_of_round=in_flight == 0)

    def claim_ended(self, ticket: ClaimTicket, *, found: bool) -> bool:
        """A claim came back with a task (``found``) or without; True when it was the last one
        in flight (the round settled)."""
        return self.claims_ended(ticket, sent=1, found=int(found))

    def claims_ended(self, ticket: ClaimTicket, *, sent: int, found: int) -> bool:
        """The ``sent`` claims of ``ticket`` came back, ``found`` of them with a task (as
        ``found`` calls of :meth:`claim_ended` with a task and then the others without); True
        when they were the last in flight (the round settled)."""
        self.in_flight -= sent
        if found:
            self._found_no_work = False
            self._cap = self.width
            self.idle_round = 0
        if found < sent:
            self.reserved -= sent - found
            self._found_no_work = True
            self._empty_seen = ticket.finished_before
        return self.in_flight == 0

    def claim_abandoned(self) -> None:
        """A claim ended without an answer (cancelled by a stop): it found nothing, it told
        nothing."""
        self.in_flight -= 1
        self.reserved -= 1

    def run_finished(self) -> None:
        """A run ended (its report may have made work for us)."""
        self._finished += 1

    def round_conclusive(self) -> bool:
        """Whether the empty round saw the queue as it is: no run finished since its empty
        claim began."""
        return self._empty_seen == self._finished

    def idle_delay_s(self, idle_min_s: float, idle_max_s: float, bound_s: float) -> float:
        """How long to idle this round (at most ``bound_s``)."""
        return min(idle_delay_s(idle_min_s, idle_max_s, self.idle_round, self._uniform), bound_s)

    def park_s(
        self,
        idle_min_s: float,
        idle_max_s: float,
        bound_s: float,
        *,
        quiet: bool,
        longest_s: float = QUIET_PARK_S,
    ) -> float:
        """How long an idle round's parked claim waits (at most ``bound_s``): the idle
        back-off, or, on a rail whose parked claim waits without a write or a poll
        (``quiet``), one draw between half the ceiling and the ceiling from the first idle
        round, the ceiling ``idle_max_s`` or ``longest_s`` if longer: a parked claim answers
        as soon as work comes, so its length costs no latency, and each park that ends empty
        costs the worker a round (a new claim, its look, its standing row written and
        withdrawn)."""
        if not quiet:
            return self.idle_delay_s(idle_min_s, idle_max_s, bound_s)
        ceiling = max(idle_max_s, longest_s)
        low = max(idle_min_s, ceiling / 2)
        return min(self._uniform(low, max(low, ceiling)), bound_s)

    def idled(self) -> None:
        """An idle wait ended: the next one backs off further until a claim finds work."""
        self.idle_round += 1

    def probe(self) -> None:
        """The empty round is dealt with: probe with one claim, widening once one finds work."""
        self._found_no_work = False
        self._cap = 1
