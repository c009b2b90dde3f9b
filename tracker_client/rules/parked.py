"""Parked claims (extension ``parked_claim``): a claim that waits at the rail until work comes.

An idle worker's pickup otherwise takes a wake-up (its ``wait_for_work`` answers) and then a
claim: over HTTP two answers and one more request. A parked claim leases the work as soon as
it is claimable and answers with the leases: one answer (docs/operate/rails.md).

A lease must never be stranded by an answer nobody takes (a stopping worker, a dropped
connection). So a parked claim is keyed (its ``Idempotency-Key`` is required) and:

* each claim it makes while parked is a ``claim_many`` under ``<key>/<i>`` (attempt ``i``);
  where the rail records an empty one (``empty_recorded``: the PostgreSQL rail's claim), the
  next attempt needs the next key; where it does not (the SQLite rail: an idle round's look
  that finds nothing then commits nothing), the next attempt reuses the key, so the attempts
  recorded are always the first ones. A retry under the same key (the caller's answer was
  lost) answers the leases its first request took: from :class:`ParkedClaims` while this
  instance remembers the key (:data:`ENDED_FOR_S`), else by replaying the last attempt
  recorded (a restarted server), which leaves out a lease gone since;
* ``cancel`` under the key stops a claim still waiting before it leases anything, and gives
  back (``release``: no attempt counted) what a claim of that key leased and its caller did
  not take: the served tracker calls it when the client leaves, a stopping worker sends it; a
  cancel that arrives before its claim (they travel on two connections) is remembered, and
  that claim answers ``[]`` at once without leasing; a claim is live (a cancel stops it)
  from its arrival, before its first await (the read of its key's record), not only once it
  waits for work: a cancel served in between would otherwise find nothing and the claim park
  on for a caller gone, leasing the next task to it (held until its TTL);
* a retry that arrives while the first request still waits (the server has not noticed the
  first connection drop) takes over: the first one stops (giving back what it leased in the
  meantime, which its gone caller will never take) and the retry parks on from its attempt.

The claim itself runs shielded from cancellation (a write that commits while its caller is
cancelled would strand its leases); a caller cancelled after it leased gives them back.

A wait that runs to its deadline with nothing noticed (no write of this instance or another
process, no lease lapsing: the rail's change mark unmoved and ``wait_for_work`` answering no
sooner than asked) answers ``[]`` without one more claim: nothing it could lease came, and a
caller that wants work parks again at once, whose first claim is that look. An idle worker's
round was two claims, the park's last look and the next park's first ~15 ms apart, each an
empty attempt written under its key (docs/benchmarks/costs.md). Work that time alone
makes claimable without a lapsing lease (a delayed task or retry coming due) is leased by
that next claim, as it was by the last look.

A parked claim waiting for work also *rides* the create that brings it: a ``create_task`` (or
``create_tasks``) that finds parked claims waiting takes the first ones along (as many as it
creates tasks, :meth:`ParkedClaims.board`) and runs their claim, under the attempt's key, in
its own transaction right after the insert (each under a savepoint: a refused claim writes
nothing and leaves the create alone). The leases are handed to the waiting claim when the
create has committed (:meth:`ParkedClaims.landed`): no wake-up, no second write, no second
trip to the database thread. A ride that leased nothing (another role's task) or did not land
(the create failed) leaves the claim to look again on its own, as it would have.

It may touch the rail's ``claim_many``, ``wait_for_work``, ``release`` and its record of keys,
through the callables :class:`~tracker_client.rules.rail.Rail` hands it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel

from tracker_client.errors import TrackerError
from tracker_client.models import Lease
from tracker_client.rules.common import Ctx

__all__ = [
    "ENDED_FOR_S",
    "ENDED_KEPT",
    "ParkedClaims",
    "Rider",
    "attempt_key",
    "give_back_all",
]

#: Ended parked claims remembered per rail instance (key -> the leases it answered), for a
#: retry or a cancel arriving after the answer; the oldest are forgotten first.
ENDED_KEPT = 4096
#: How long an ended parked claim is remembered (seconds since it ended, or since a retry last
#: asked for it), at most :data:`ENDED_KEPT` of them. A retry of an answer its caller lost, a
#: cancel after the answer (its caller left) or one that overtook its claim come within
#: moments; a retry later than this replays the rail's record of the attempt (as on a
#: restarted server). Without it, an idle worker picking up one task at a time kept every
#: answer's lease until the 4,096th: ~6 MiB more RSS per 1,000 pickups, ~25 MiB at the bound
#: (docs/benchmarks/memory.md).
ENDED_FOR_S = 60.0

#: One attempt's claim (``claim_many`` under the key given).
Claim = Callable[[str], Awaitable[list[Lease]]]
#: The rail's ``wait_for_work(timeout_s, since=mark)``.
WaitForWork = Callable[[float, str], Awaitable[str]]
#: Give one lease back (``release``).
GiveBack = Callable[[Lease], Awaitable[None]]

#: How long a create that carried parked claims waits for them to answer first (a woken claim
#: is through its wait and back to its caller in about 7 scheduling passes, well under this).
ANSWER_WAIT_S = 0.002
#: Passes the create still lets go by once the claims that rode it have answered: their
#: callers' answers (the served tracker's route: its task group, the response) go out in
#: them, before the create's own (a pickup waits on the claim, not on the create).
AFTER_PASSES = 4
#: A wait for work answering this close to its deadline ran to it (an event loop's timer may
#: fire a clock tick early); a lease lapsing within it is leased by the caller's next claim.
_SLACK_S = 0.001
#: One attempt's claim inside another write's transaction (``claim_many`` under the key given).
RideClaim = Callable[[Ctx, str], list[Lease]]


def attempt_key(key: str, attempt: int) -> str:
    """The idempotency key of a parked claim's ``attempt``-th ``claim_many``."""
    return f"{key}/{attempt}"


@dataclass(eq=False)
class _Parked:
    """One parked claim waiting at this instance."""

    attempt: int
    cancelled: bool = False
    #: Cancelled to end the current wait for work: a cancel, a retry taking over, or the
    #: create it rode having answered (a fresh one per wait, :meth:`end_wait`).
    waiting: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    leases: list[Lease] = field(default_factory=list)
    released: int = 0
    #: How many leases it asks for, and its claim inside another write (None: it never rides).
    n: int = 1
    ride: RideClaim | None = None
    #: Waiting for work now, and not taken along by a create yet.
    boardable: bool = False
    #: Set when the create that took it along has answered (made when it boards).
    landed: anyio.Event | None = None
    #: The ride's leases once landed (None: it did not land, or leased under no record).
    rode: list[Lease] | None = None
    #: Whether the rail records an attempt that leased nothing (else its key is reused).
    empty_recorded: bool = True

    #: The change mark its current wait began from, and the rail's mark (see :meth:`woken`).
    seen: str = ""
    mark: Callable[[], str] | None = None

    def end_wait(self) -> None:
        """End the current wait for work (or the next one at once, if it has not begun)."""
        self.waiting.cancel()

    def woken(self) -> bool:
        """Whether a write of this instance has ended its wait already (the rail's change mark
        moved since the wait began): no cancel is needed, and one would only cost the wait's
        way back an exception unwinding through it."""
        return self.mark is not None and self.mark() != self.seen

    def attempted(self, leases: Sequence[Lease]) -> None:
        """An attempt answered ``leases``: the next one takes the next key if this one was
        recorded."""
        if leases or self.empty_recorded:
            self.attempt += 1


class Rider:
    """A parked claim taken along by a create: its claim runs in the create's transaction
    (:meth:`claim`, on the database's thread), its leases go to the claim once committed."""

    __slots__ = ("_entry", "_key", "leases")

    def __init__(self, entry: _Parked, key: str) -> None:
        self._entry = entry
        self._key = key
        #: The claim's leases (None: refused or not run), set by :meth:`claim`.
        self.leases: list[Lease] | None = None

    def claim(self, ctx: Ctx) -> None:
        """Run the claim under a savepoint of ``ctx``'s transaction: a refused claim is
        rolled back alone (the create it rides with is not refused for it)."""
        ride = self._entry.ride
        assert ride is not None  # only claims with a ride board
        self.leases = None
        # The savepoint statements finish_many's items use (every engine has them).
        ctx.exec("finish_many.savepoint")
        try:
            leases = ride(ctx, attempt_key(self._key, self._entry.attempt))
        except TrackerError:
            ctx.exec("finish_many.rollback_item")
            ctx.exec("finish_many.release_item")
            return
        ctx.exec("finish_many.release_item")
        self.leases = leases


async def give_back_all(leases: Sequence[Lease], give_back: GiveBack) -> int:
    """Release ``leases`` a parked claim leased for a caller who will not take them, shielded (a
    cancelled caller still gives them back); how many were given back. A lease already gone
    (finished, expired) is skipped: nothing is held."""
    released = 0
    with anyio.CancelScope(shield=True):
        for lease in leases:
            try:
                await give_back(lease)
            except TrackerError:
                continue  # gone already: nothing held
            released += 1
    return released


class ParkedClaims:
    """One rail instance's parked claims by key, and the last ones ended (see the module)."""

    def __init__(
        self,
        kept: int = ENDED_KEPT,
        kept_s: float = ENDED_FOR_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._live: dict[str, _Parked] = {}
        #: key -> (when it ended or a retry last asked, on ``now``'s clock; what it answered),
        #: the oldest first
        self._ended: OrderedDict[str, tuple[float, list[Lease]]] = OrderedDict()
        self._kept = kept
        self._kept_s = kept_s
        self._now = now
        #: Claims that rode a create and leased (tests and benches read it).
        self.rides = 0

    def board(self, tasks: int) -> list[Rider]:
        """The parked claims a create of ``tasks`` tasks takes along: the longest waiting
        first, until their ``n`` cover the tasks (see the module docstring)."""
        riders: list[Rider] = []
        room = tasks
        if not self._live:
            return riders
        for key, entry in self._live.items():
            if room <= 0:
                break
            if not entry.boardable or entry.cancelled or entry.ride is None:
                continue
            entry.boardable = False
            entry.landed = anyio.Event()
            riders.append(Rider(entry, key))
            room -= entry.n
        return riders

    async def answered(self, riders: Sequence[Rider], wait_s: float = ANSWER_WAIT_S) -> None:
        """Until the claims that rode have answered their callers (``wait_s`` at most) and
        :data:`AFTER_PASSES` more scheduling passes have gone by (the create that carried them
        answers after them). Shielded: the create has committed, its answer must go out.

        It waits on each claim's end instead of looking once per scheduling pass: a look per
        pass ran on the same event loop as the claims' way back to their callers, between each
        of their steps (docs/benchmarks/pickup.md)."""
        with anyio.move_on_after(wait_s, shield=True):
            for rider in riders:
                await rider._entry.done.wait()
        for _ in range(AFTER_PASSES):
            await anyio.lowlevel.cancel_shielded_checkpoint()

    def landed(self, riders: Sequence[Rider], *, committed: bool) -> None:
        """The create the ``riders`` rode has answered (``committed``: its transaction, their
        claims in it, committed); hand each claim its leases and wake it."""
        for rider in riders:
            entry = rider._entry
            if committed and rider.leases is not None:
                entry.attempted(rider.leases)  # the ride's attempt, recorded as any other
                entry.rode = rider.leases
                if rider.leases:
                    self.rides += 1
            if entry.landed is not None:
                entry.landed.set()
            if not entry.woken():  # (the create's own wake-up ends it, as a rule)
                entry.end_wait()  # its wait ends now, not when the write's wake-up gets to it

    @property
    def waiting(self) -> int:
        """Parked claims waiting for work now (not those still reading their key's record)."""
        return sum(1 for e in self._live.values() if e.boardable or e.landed is not None)

    async def park(
        self,
        key: str,
        wait_s: float,
        *,
        claim: Claim,
        mark: Callable[[], str],
        wait_for_work: WaitForWork,
        recorded: Callable[[], Awaitable[int]],
        give_back: GiveBack,
        ride: RideClaim | None = None,
        n: int = 1,
        empty_recorded: bool = True,
    ) -> list[Lease]:
        """Claim under ``key``, waiting up to ``wait_s`` for work; the leases (empty: none
        came, or the claim was cancelled). ``mark``: the rail's change mark now;
        ``recorded``: how many attempts of ``key`` the rail has recorded; ``ride``: the same
        claim inside a create's transaction (None: it never rides), ``n`` leases at most;
        ``empty_recorded``: whether ``claim`` and ``ride`` record an attempt that leased
        nothing (else the next attempt reuses its key)."""
        old = self._live.get(key)
        self._forget_old()
        if old is None and key in self._ended:  # a retry, or its cancel came first
            leases = self._ended.pop(key)[1]
            self._ended[key] = (self._now(), leases)
            return list(leases)
        # Live before its first await: a cancel (or the client leaving) that arrives while it
        # reads its record or waits for the claim it takes over from stops it, instead of
        # finding no claim and being forgotten while this one parks on for a caller gone.
        entry = self._live[key] = _Parked(0, n=n, ride=ride, empty_recorded=empty_recorded)
        try:
            if old is not None:  # a retry while the first request still waits: it takes over
                old.cancelled = True
                old.end_wait()
                await old.done.wait()  # it leases nothing more, and gave back what it had
                entry.attempt = old.attempt
            else:
                entry.attempt = await recorded()
                if entry.attempt and not entry.cancelled:
                    # A key this instance does not know (restarted): replay the last attempt.
                    with anyio.CancelScope(shield=True):
                        entry.leases = await claim(attempt_key(key, entry.attempt - 1))
            if not entry.leases:
                await self._wait_and_claim(entry, key, wait_s, claim, mark, wait_for_work)
            if entry.cancelled and entry.leases:
                await self._give_back(entry, give_back)
        except BaseException:
            if entry.leases:  # the caller was cancelled after the claim leased
                await self._give_back(entry, give_back)
            raise
        finally:
            if self._live.get(key) is entry:  # (a later retry may have taken the key over)
                del self._live[key]
            self._ended_with(key, entry.leases)
            entry.done.set()
        return list(entry.leases)

    async def _wait_and_claim(
        self,
        entry: _Parked,
        key: str,
        wait_s: float,
        claim: Claim,
        mark: Callable[[], str],
        wait_for_work: WaitForWork,
    ) -> None:
        deadline = anyio.current_time() + max(0.0, wait_s)
        while not entry.cancelled:
            # Before the claim: a write after its look ends the wait at once.
            seen = entry.seen = mark()
            entry.mark = mark
            with anyio.CancelScope(shield=True):
                entry.leases = await claim(attempt_key(key, entry.attempt))
            entry.attempted(entry.leases)
            remaining = deadline - anyio.current_time()
            if entry.leases or entry.cancelled or remaining <= 0:
                return
            # The wait runs in this task, in a scope whatever else ends it cancels: no task of
            # its own (racing one against an event cost its start and its cancel on the
            # pickup's path), and no cancelled task: anyio keeps a cancelled task's
            # CancelledError in a reference cycle with its frames, freed only by the cyclic
            # collector (a worker with gc_tuning's high threshold held ~3.5 MiB more of them).
            waiting = entry.waiting = anyio.CancelScope()
            entry.boardable = True
            timed_out = False
            try:
                with waiting:
                    got = await wait_for_work(remaining, seen)
                    # Ran to its deadline with nothing noticed (a lapsing lease, another
                    # process's commit, answer sooner; a timer may fire a tick early).
                    timed_out = got == seen and anyio.current_time() >= deadline - _SLACK_S
            finally:
                entry.boardable = False
                if entry.landed is not None:  # taken along: its claim is in a create's write
                    with anyio.CancelScope(shield=True):
                        await entry.landed.wait()
                    entry.landed = None
                    entry.leases, entry.rode = entry.rode or [], None
            if entry.leases or timed_out:
                return  # a quiet deadline: no last look (see the module docstring)
            # Woken (a write, a lease lapsing, another process's commit): one more look,
            # unless cancelled meanwhile.

    def ended(self, key: str) -> bool:
        """Whether a parked claim of ``key`` ended here, or its cancel came first: a claim of
        ``key`` arriving now is answered at once by :meth:`park` (what it answered, or ``[]``)."""
        self._forget_old()
        return key in self._ended

    async def cancel(self, key: str, give_back: GiveBack) -> int:
        """Stop the parked claim of ``key`` (it leases nothing more) and give back what it
        leased and its caller did not take; how many leases were given back."""
        live = self._live.get(key)
        if live is not None:
            live.cancelled = True
            live.end_wait()
            await live.done.wait()
            return live.released
        self._forget_old()
        if key not in self._ended:
            # The cancel overtook its claim (two connections; a stopping worker): the claim
            # that arrives after it answers at once and leases nothing (see :meth:`park`).
            self._ended_with(key, [])
            return 0
        since, leases = self._ended[key]
        if not leases:
            return 0
        entry = _Parked(0, cancelled=True, leases=leases)
        await self._give_back(entry, give_back)
        if key in self._ended:
            self._ended[key] = (since, [])
        return entry.released

    async def _give_back(self, entry: _Parked, give_back: GiveBack) -> None:
        """Release ``entry``'s leases (:func:`give_back_all`)."""
        leases: Sequence[Lease] = entry.leases
        entry.leases = []
        entry.released += await give_back_all(leases, give_back)

    def _ended_with(self, key: str, leases: list[Lease]) -> list[Lease]:
        """Remember what the parked claim of ``key`` answered; answer a copy."""
        self._ended.pop(key, None)
        self._ended[key] = (self._now(), list(leases))
        self._forget_old()
        return list(leases)

    def _forget_old(self) -> None:
        """Forget the ended claims past :data:`ENDED_KEPT`, and those remembered longer than
        :data:`ENDED_FOR_S` (the oldest first: the order they ended or were last asked for)."""
        ended = self._ended
        oldest = self._now() - self._kept_s
        while ended and (len(ended) > self._kept or next(iter(ended.values()))[0] < oldest):
            ended.popitem(last=False)
