"""A lease's end by the worker's own clock, and the cancel scopes that must not outlive it.

A heartbeat that hangs (the tracker accepted the connection and never answers) only fails after
the request timeout, which may be far longer than the lease. So a run does not wait for the
tracker to say the lease is gone: it keeps the lease's end on its own monotonic clock. Two ends
are kept (docs/guarantees/stalled-tracker.md):

* :attr:`LocalLease.expires_at`, the *confirmed* end: what the tracker last answered, counted
  from when that claim or heartbeat was *sent* (a slow answer never lengthens it). Every scope
  doing work under the lease (the executor, its writes) gets it, minus a safety margin, as its
  deadline: past it someone else may hold the task.
* :attr:`LocalLease.held_until`, the latest end the tracker *may* hold: a heartbeat that hung
  may still have landed, and one that lands grants ``grant_s`` from its arrival. On a plain
  NullTickets server that is 300 s whatever TTL was asked (its heartbeat resets every lease to
  300 s), so one hung heartbeat after a landed one leaves the task held for five minutes. The
  final report (a transition, or handing the run back) keeps trying until then instead of
  abandoning the task: the tracker refuses a write under a lease that is really gone, so trying
  is safe, and giving up would strand the task until the tracker's own expiry.

The confirmed end is the earlier of ``sent + grant`` and the tracker's own ``expires_at_ms``
read against our wall clock. A tracker clock behind ours only shortens the lease (safe); one far
enough ahead to say "already expired" is taken for clock skew and ignored.

A watched scope's deadline is armed when it can next matter, not always at once: every run is
heartbeated a third of the TTL after it starts (the keeper's schedule, :mod:`worker.keeper`),
and the heartbeat, sent, arms every scope's deadline (:meth:`LocalLease.heartbeat_sent`). So a
scope watched while its end is more than half the TTL away waits for that heartbeat; one
watched later, or after any heartbeat of the lease was sent, is armed at once. A task done
before its first heartbeat (most) arms no timer: ~5 us of the event loop's CPU per run
(docs/benchmarks.md). A final report after the executor needs no heartbeat while half the lease
is left (:meth:`LeaseSession.heartbeat <worker.lease.LeaseSession.heartbeat>`), and sends one,
arming its scope, once less is: at least a sixth of the TTL before the confirmed end.

It may touch anyio's cancel scopes and the monotonic and wall clocks only: no tracker, no I/O.
"""

from __future__ import annotations

import functools
import math
import time
from asyncio import get_running_loop
from collections.abc import Callable

import anyio

__all__ = ["LocalLease", "loop_clock", "loop_time", "safety_margin_s"]

#: The margin is this share of the TTL...
MARGIN_SHARE = 0.1
#: ... but at least this (a loaded event loop lags, an executor takes time to die) ...
MARGIN_MIN_S = 1.0
#: ... and at most this, and never more than this share of the TTL (heartbeats, due every third
#: of it, need time to get through before the deadline).
MARGIN_MAX_S = 5.0
MARGIN_MAX_SHARE = 0.25


@functools.lru_cache(maxsize=32)  # (a run asks it for its TTL: a worker has a few TTLs)
def safety_margin_s(ttl_s: float) -> float:
    """How long before the lease's end the worker stops work under it: 10 % of the TTL, at least
    1 s and at most 5 s, never more than a quarter of the TTL (room for the claim's round trip,
    a lagging event loop and for killing the executor)."""
    return min(max(ttl_s * MARGIN_SHARE, MARGIN_MIN_S), ttl_s * MARGIN_MAX_SHARE, MARGIN_MAX_S)


def loop_time() -> float:
    """``anyio.current_time()``: read straight from the running asyncio loop, as anyio's asyncio
    backend reads it, without looking the backend up first (the lookup is most of the call's
    cost, paid a few times per run); through anyio on another backend (trio)."""
    try:
        return get_running_loop().time()
    except RuntimeError:
        return anyio.current_time()


def loop_clock() -> Callable[[], float]:
    """:func:`loop_time` as a function bound to the running loop, looked up once: what a
    long-lived object made in the loop (the claim loop, the keeper) and every run's lease read
    many times. Finding the running loop is a system call on CPython 3.11 (``getpid``: its
    fork check), and a run reads the clock several times."""
    try:
        return get_running_loop().time
    except RuntimeError:
        return anyio.current_time


class LocalLease:
    """The lease's ends on ``anyio.current_time()``'s clock (see the module docstring): watched
    work scopes follow the confirmed end, watched report scopes the latest end it may hold."""

    __slots__ = (
        "_armed",
        "_flying",
        "_now",
        "_reports",
        "_scopes",
        "confirmed_at",
        "deadline",
        "expires_at",
        "grant_s",
        "held_until",
        "margin_s",
        "report_deadline",
        "ttl_s",
    )

    def __init__(
        self,
        ttl_s: float,
        sent_at: float,
        tracker_expires_ms: int | None,
        heartbeat_grant_s: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """A lease of ``ttl_s`` claimed at ``sent_at``; the tracker said ``tracker_expires_ms``.
        ``heartbeat_grant_s``: what a heartbeat grants whatever TTL it asks (300 s on a plain
        NullTickets server); None: the TTL asked. ``clock``: the running loop's
        (:func:`loop_clock`), when the caller holds it (default: looked up now)."""
        self._now = now_of = loop_clock() if clock is None else clock
        self.ttl_s = ttl_s
        #: What one heartbeat that lands grants, from its arrival at the tracker.
        self.grant_s = ttl_s if heartbeat_grant_s is None else max(ttl_s, heartbeat_grant_s)
        self.margin_s = safety_margin_s(ttl_s)
        now = now_of()
        self.expires_at = self._end(sent_at, tracker_expires_ms, ttl_s, now)
        #: When the tracker last confirmed the lease (the send time of that claim or heartbeat).
        self.confirmed_at = sent_at
        #: The latest the tracker may hold the lease (the claim's answer came by now).
        self.held_until = max(self.expires_at, now + ttl_s)
        self._flying = 0  # heartbeats sent and not yet answered nor given up
        self._armed = False  # a heartbeat was sent: scopes watched from now on get deadlines
        self._scopes: list[anyio.CancelScope] = []
        self._reports: list[anyio.CancelScope] = []
        # The two deadlines, kept as fields (moved with the ends, in _follow): a property is a
        # Python call on every read on CPython 3.11, and each run reads them several times.
        #: When work under the lease must stop: its confirmed end minus the safety margin.
        self.deadline = self.expires_at - self.margin_s
        #: When trying to report or hand the run back is pointless: the latest end the tracker
        #: may hold the lease (with a heartbeat in flight, it may still land before
        #: :attr:`held_until` and grant ``grant_s`` from there).
        self.report_deadline = self.held_until

    @staticmethod
    def _end(sent_at: float, tracker_expires_ms: int | None, granted_s: float, now: float) -> float:
        end = sent_at + granted_s
        if tracker_expires_ms is not None:
            left = tracker_expires_ms / 1000 - time.time()
            if 0 < left < granted_s:  # else: skew, or the grant is the earlier end anyway
                end = min(end, now + left)
        return end

    def remaining_s(self) -> float:
        """Seconds until :attr:`deadline`, never negative."""
        return max(0.0, self.deadline - self._now())

    def expired(self) -> bool:
        """Whether the deadline (of work under the confirmed end) has passed."""
        return self._now() >= self.deadline

    def released(self) -> bool:
        """Whether the tracker can no longer hold the lease (:attr:`report_deadline` passed)."""
        return self._now() >= self.report_deadline

    # -- heartbeats: the one place the ends move ----------------------------------------------
    def heartbeat_sent(self) -> None:
        """A heartbeat is on its way: until it is answered or given up it may land."""
        self._flying += 1
        self._follow()

    def extended(self, sent_at: float, tracker_expires_ms: int | None) -> None:
        """The heartbeat sent at ``sent_at`` was answered: the tracker's answer is the lease's
        end now (it grants ``grant_s`` from the heartbeat's arrival, between sending and now)."""
        self._flying = max(0, self._flying - 1)
        now = self._now()
        self.expires_at = self._end(sent_at, tracker_expires_ms, self.grant_s, now)
        self.confirmed_at = sent_at
        self.held_until = max(self.expires_at, now + self.grant_s)
        self._follow()

    def unanswered(self) -> None:
        """A heartbeat ended without an answer (failed, timed out, cancelled): it may have
        landed at any time before now, though not after the lease had already run out."""
        self._flying = max(0, self._flying - 1)
        now = self._now()
        self.held_until = max(self.held_until, min(now, self.held_until) + self.grant_s)
        self._follow()

    def _follow(self) -> None:
        """The ends moved (every change of them ends here): the deadlines follow, and so do
        the watched scopes'."""
        self._armed = True
        deadline = self.deadline = self.expires_at - self.margin_s
        held = self.held_until
        report = self.report_deadline = held + self.grant_s if self._flying else held
        for scope in self._scopes:
            scope.deadline = deadline
        for scope in self._reports:
            scope.deadline = report

    # -- scopes ---------------------------------------------------------------------------------
    def _arm_now(self, end: float) -> bool:
        """Whether a scope watched now must get its deadline (``end``) at once: a heartbeat
        was sent already, or ``end`` comes within half the TTL (else the run's first
        heartbeat, due a third of the TTL after it started, arms it: the module docstring)."""
        return self._armed or end - self._now() <= self.ttl_s / 2

    def watch(self, scope: anyio.CancelScope) -> anyio.CancelScope:
        """Give ``scope`` (work under the lease) the lease's deadline from now on (armed as
        the module docstring says); returns it."""
        deadline = self.deadline
        if self._arm_now(deadline):
            scope.deadline = deadline
        self._scopes.append(scope)
        return scope

    def watch_report(self, scope: anyio.CancelScope) -> anyio.CancelScope:
        """Give ``scope`` (the final report) :attr:`report_deadline` from now on (armed as
        the module docstring says); returns it."""
        deadline = self.report_deadline
        if self._arm_now(deadline):
            scope.deadline = deadline
        self._reports.append(scope)
        return scope

    def to_report(self, scope: anyio.CancelScope) -> None:
        """``scope``, watched as work, goes on as the final report's: shielded from the
        worker's shutdown, with :attr:`report_deadline` from now on (the run's one scope for
        its executor and its report)."""
        self._scopes.remove(scope)
        scope.shield = True
        deadline = self.report_deadline
        if scope.deadline != math.inf or self._arm_now(deadline):  # armed stays armed
            scope.deadline = deadline
        self._reports.append(scope)

    def unwatch(self, scope: anyio.CancelScope) -> None:
        """Stop moving ``scope``'s deadline."""
        if scope in self._scopes:
            self._scopes.remove(scope)
        if scope in self._reports:
            self._reports.remove(scope)

    def release(self, scope: anyio.CancelScope) -> None:
        """Stop moving ``scope``'s deadline and hand it back as :meth:`watch` took it: no
        deadline, not shielded (a scope that outlives the run: its runner task's,
        :mod:`worker.daemon.runners`)."""
        self.unwatch(scope)
        scope.shield = False
        if scope.deadline != math.inf:  # (its timer, if one is armed, goes with it)
            scope.deadline = math.inf

    def cancel_work(self) -> None:
        """The lease could not be confirmed in time: cancel every watched work scope (a report
        may still go through)."""
        for scope in self._scopes:
            scope.cancel()

    def cancel_all(self) -> None:
        """The tracker said the lease is gone: cancel every watched scope."""
        for scope in (*self._scopes, *self._reports):
            scope.cancel()
