"""Parked claims (extension ``parked_claim``): a claim that waits at the rail until work comes.

An idle worker's pickup otherwise takes a wake-up (its ``wait_for_work`` answers) and then a
claim: over HTTP two answers and one more request. A parked claim leases the work as soon as
it is claimable and answers with the leases: one answer (docs/operate/rails.md).

A lease must never be stranded by an answer nobody takes (a stopping worker, a dropped
connection). So a parked claim is keyed (its ``Idempotency-Key`` is required) and:

* each claim it makes while parked is a ``claim_many`` under ``<key>/<i>`` (attempt ``i``):
  an empty one is recorded as empty, so the next attempt needs the next key; a retry under
  the same key (the caller's answer was lost) answers the leases its first request took: from
  :class:`ParkedClaims` while this instance remembers the key, else by replaying the last
  attempt recorded (a restarted server), which leaves out a lease gone since;
* ``cancel`` under the key stops a claim still waiting before it leases anything, and gives
  back (``release``: no attempt counted) what a claim of that key leased and its caller did
  not take: the served tracker calls it when the client leaves, a stopping worker sends it;
* a retry that arrives while the first request still waits (the server has not noticed the
  first connection drop) takes over: the first one stops (giving back what it leased in the
  meantime, which its gone caller will never take) and the retry parks on from its attempt.

The claim itself runs shielded from cancellation (a write that commits while its caller is
cancelled would strand its leases); a caller cancelled after it leased gives them back.

It may touch the rail's ``claim_many``, ``wait_for_work``, ``release`` and its record of keys,
through the callables :class:`~tracker_client.rules.rail.Rail` hands it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio

from tracker_client.errors import TrackerError
from tracker_client.models import Lease

__all__ = ["ENDED_KEPT", "ParkedClaims", "attempt_key"]

#: Ended parked claims remembered per rail instance (key -> the leases it answered), for a
#: retry or a cancel arriving after the answer; the oldest are forgotten first.
ENDED_KEPT = 4096

#: One attempt's claim (``claim_many`` under the key given).
Claim = Callable[[str], Awaitable[list[Lease]]]
#: The rail's ``wait_for_work(timeout_s, since=mark)``.
WaitForWork = Callable[[float, str], Awaitable[str]]
#: Give one lease back (``release``).
GiveBack = Callable[[Lease], Awaitable[None]]


def attempt_key(key: str, attempt: int) -> str:
    """The idempotency key of a parked claim's ``attempt``-th ``claim_many``."""
    return f"{key}/{attempt}"


@dataclass(eq=False)
class _Parked:
    """One parked claim waiting at this instance."""

    attempt: int
    cancelled: bool = False
    wake: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    leases: list[Lease] = field(default_factory=list)
    released: int = 0


class ParkedClaims:
    """One rail instance's parked claims by key, and the last ones ended (see the module)."""

    def __init__(self, kept: int = ENDED_KEPT) -> None:
        self._live: dict[str, _Parked] = {}
        self._ended: OrderedDict[str, list[Lease]] = OrderedDict()
        self._kept = kept

    @property
    def waiting(self) -> int:
        """Parked claims waiting now."""
        return len(self._live)

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
    ) -> list[Lease]:
        """Claim under ``key``, waiting up to ``wait_s`` for work; the leases (empty: none
        came, or the claim was cancelled). ``mark``: the rail's change mark now;
        ``recorded``: how many attempts of ``key`` the rail has recorded."""
        attempt = 0
        old = self._live.get(key)
        if old is not None:  # a retry while the first request still waits: it takes over
            old.cancelled = True
            old.wake.set()
            await old.done.wait()  # it leases nothing more, and gave back what it had
            attempt = old.attempt
        elif key in self._ended:
            self._ended.move_to_end(key)
            return list(self._ended[key])
        else:
            attempt = await recorded()
            if attempt:  # a key this instance does not know (restarted): replay the last one
                with anyio.CancelScope(shield=True):
                    leases = await claim(attempt_key(key, attempt - 1))
                if leases:
                    return self._ended_with(key, leases)
        entry = self._live[key] = _Parked(attempt)
        try:
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
            seen = mark()  # before the claim: a write after its look ends the wait at once
            with anyio.CancelScope(shield=True):
                entry.leases = await claim(attempt_key(key, entry.attempt))
            entry.attempt += 1
            remaining = deadline - anyio.current_time()
            if entry.leases or entry.cancelled or remaining <= 0:
                return
            async with anyio.create_task_group() as tg:

                async def work(seen: str = seen, remaining: float = remaining) -> None:
                    await wait_for_work(remaining, seen)
                    tg.cancel_scope.cancel()

                async def cancelled() -> None:
                    await entry.wake.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(work)
                tg.start_soon(cancelled)
            # Woken, or timed out: either way one more look (work that came with the deadline
            # is not left behind), unless cancelled meanwhile.

    async def cancel(self, key: str, give_back: GiveBack) -> int:
        """Stop the parked claim of ``key`` (it leases nothing more) and give back what it
        leased and its caller did not take; how many leases were given back."""
        live = self._live.get(key)
        if live is not None:
            live.cancelled = True
            live.wake.set()
            await live.done.wait()
            return live.released
        leases = self._ended.get(key)
        if not leases:
            return 0
        entry = _Parked(0, cancelled=True, leases=leases)
        await self._give_back(entry, give_back)
        self._ended[key] = []
        return entry.released

    async def _give_back(self, entry: _Parked, give_back: GiveBack) -> None:
        """Release ``entry``'s leases (shielded: a cancelled caller still gives them back); a
        lease already gone (finished, expired) counts as given back."""
        leases: Sequence[Lease] = entry.leases
        entry.leases = []
        with anyio.CancelScope(shield=True):
            for lease in leases:
                try:
                    await give_back(lease)
                except TrackerError:
                    continue  # gone already: nothing held
                entry.released += 1

    def _ended_with(self, key: str, leases: list[Lease]) -> list[Lease]:
        """Remember what the parked claim of ``key`` answered; answer a copy."""
        self._ended[key] = list(leases)
        self._ended.move_to_end(key)
        while len(self._ended) > self._kept:
            self._ended.popitem(last=False)
        return list(leases)
