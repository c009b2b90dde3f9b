"""Claiming ahead: the next batch's leases taken with this batch's final reports.

A worker whose runs are short claims a batch, runs it, reports it (``finish_many``) and claims
the next batch for the slots it freed. Each of those writes waits for the rail (on PostgreSQL
at stock durability a WAL flush, ~1.5-2.5 ms; on a served rail an HTTP request and the
server's commit), and the next batch cannot start before its claim is answered: the worker's
CPU and the rail's write alternate, neither overlapping the other (measured on PostgreSQL: a
2.3 ms statement, then ~1.1 ms of the worker running the ten runs it brought, in turn).
PgQueuer overlaps them by holding up to twice its batch picked (docs/benchmarks/postgresql.md).

This module is the bookkeeping the rails that do it share, with no new operation on the
wire: while one instance's worker drains a role (its ``claim_many`` calls come within
:data:`BUSY_S` of each other), a ``finish_many`` of the runs it leased also claims, in the same
write, a batch (as many leases as the last ``claim_many`` asked for) while fewer than two are
kept, and :class:`ClaimAhead` keeps them. Two: the worker's claim for the slots a batch freed
comes beside that batch's reports, before or after them, and finds one batch kept either way,
so every report carries the next claim and no claim goes alone (one batch kept measured 0.11
statements per task on PostgreSQL, a lone report or claim in every third; two, 0.07:
docs/benchmarks/postgresql.md).
The PostgreSQL rail claims in the report's statement and transaction (``bw_finish_claim_tx``,
:mod:`tracker_client.postgres.pairing`); the served rail's client in the report's request
(extension ``finish_claim``, :mod:`tracker_client.nulltickets.ahead`); the embedded rail in the
report's commit (:mod:`tracker_client.embedded.tracker`). The next ``claim_many``
for the same agent, role and TTL is answered from them at once, without a round trip, and the
runs start while the next reports and claim are being written. A ``claim_many`` that finds none
kept while such a claim is in flight waits for it instead of sending its own.

A call answered with kept leases under an idempotency key is remembered (the last
:data:`REMEMBERED_ANSWERS`): its replay answers the same leases with the same tokens, those
still live, as the rail's record answers any other replay. The record is in this process only:
the caller's retries come to the instance that answered (a worker's rail is in its own
process).

What a kept lease promises is what any lease promises: its row is leased to the agent, under
the TTL it asked for, from the moment the statement committed (the ``Lease`` says when it
ends, and the worker's own clock keeps the earlier of that and its own count,
docs/guarantees/worker.md). It is handed out within :data:`MAX_AGE_S` or not at all: an
older one is released at the worker's next claim or report, and every one still kept when the
rail closes or stops claiming ahead is released (the run ends ``released``, nothing counted:
the task is claimable again at once; the embedded rail withdraws it instead, leaving no run and
the attempt count as it was). A worker claiming one lease at a time (its last
``claim_many`` asked for one) is not claimed ahead for, but takes what is kept. A process
killed meanwhile leaves them to expire with the TTL, as it leaves the leases of its runs.

An instance claimed through for more than one agent, role or TTL (a server fronting the rail
for several workers, a worker of several roles) stops claiming ahead at the second one, and
releases what it kept: their claims would take turns, each releasing what the other's reports
claimed.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

import anyio
from pydantic import SecretStr

from tracker_client.capabilities import LeaseHandle
from tracker_client.contract.batch_models import MAX_CLAIM_MANY
from tracker_client.errors import TrackerError
from tracker_client.models import Lease

log = logging.getLogger("backlog_worker.tracker")

__all__ = [
    "AHEAD_RELEASED",
    "BUSY_S",
    "MAX_AGE_S",
    "REMEMBERED_ANSWERS",
    "REMEMBERED_KEYS",
    "ClaimAhead",
    "Granted",
    "Kept",
    "leases_of",
]

#: A ``claim_many`` this recent makes the role's worker busy: its next reports claim ahead.
BUSY_S = 0.25
#: Keys remembered for replays (the oldest forgotten first): a worker replays only the claim
#: it is retrying. Of them, the answers given with kept leases (each holds its leases).
REMEMBERED_KEYS = 256
REMEMBERED_ANSWERS = 4
#: The longest a kept lease waits for a ``claim_many`` before it is released.
MAX_AGE_S = 1.0
#: The reason a kept lease no ``claim_many`` took is released with (its run ends ``released``).
AHEAD_RELEASED = "claimed_ahead_unused"
#: A rail's claim of ``n`` under the key given (a lost claim ahead's replay).
ReplayClaim = Callable[[str, int], Awaitable[list[Lease]]]
#: A rail's release of one lease, with the reason given.
Release = Callable[[LeaseHandle, str], Awaitable[object]]


class Granted(NamedTuple):
    """A lease the claim ahead granted, as its row came back: its ``Lease`` is built when it
    is handed out (building ten ``Lease`` s took ~0.5 ms on the loop, between one batch's
    answer and the next batch's send). A tuple: made ten at a time on the loop, where a
    frozen dataclass sets each field through ``object.__setattr__``."""

    row: Any
    run_id: str
    lease_id: str
    token: str
    now: int
    agent: str
    role: str

    @property
    def ref(self) -> LeaseHandle:
        """What releasing it needs."""
        return LeaseHandle(self.lease_id, self.run_id, SecretStr(self.token))


#: A kept lease: granted (its ``Lease`` not built yet) or built (given back by a call).
Kept = Granted | Lease


async def leases_of(kept: Sequence[Kept]) -> list[Lease]:
    """Kept leases of a rail whose claim ahead keeps each as its claim built it (the embedded
    rail's, the served client's): no :class:`Granted` to build."""
    return [lease for lease in kept if isinstance(lease, Lease)]


class ClaimAhead:
    """Leases claimed ahead for one agent's ``claim_many`` (see the module)."""

    def __init__(self, enabled: bool = True) -> None:
        """``enabled``: False never claims ahead (every call answers as it did before)."""
        self.enabled = enabled
        #: The longest a lease is kept (:data:`MAX_AGE_S`).
        self.max_age_s = MAX_AGE_S
        #: (agent, role, ttl) of the last plain ``claim_many``, and its n.
        self._who: tuple[str, str, int] | None = None
        self._n = 0
        self._last_claim = -1e9
        #: (kept since: monotonic seconds, the lease), oldest first.
        self._kept: deque[tuple[float, Kept]] = deque()
        #: Set when the claim in flight with a ``finish_many`` is answered (None: none is).
        self._flying: anyio.Event | None = None
        #: A ``claim_many`` found fewer kept than it asked for: the next claim ahead takes
        #: a batch more, so that one is kept while the other is flushed.
        self._short = False
        #: Released (stale, unwanted) leases waiting for the rail to give them back.
        self._unwanted: list[Kept] = []
        #: idempotency key -> (the call's fingerprint, its answer) of the keyed calls answered
        #: with kept leases, newest last (see :meth:`answered`).
        self._answers: OrderedDict[str, tuple[str, list[Lease]]] = OrderedDict()
        #: Keys of the calls that came (see :meth:`seen`), newest last.
        self._keys: OrderedDict[str, None] = OrderedDict()
        #: (key, n) of claims ahead whose answers were lost.
        self._lost: list[tuple[str, int]] = []
        self._came_short = False
        #: Claims ahead sent (their keys' sequence number).
        self.sent_n = 0
        #: Leases claimed ahead, and those handed out, for the tests and the benchmarks.
        self.claimed = 0
        self.handed = 0

    def asked(self, agent: str, role: str, ttl_ms: int, n: int) -> bool:
        """A plain ``claim_many`` came (no limits): note it; True when it may be answered
        from what is kept (the same agent, role and TTL as the kept leases'), whatever its
        ``n``: a worker with one slot free takes a kept lease too."""
        if not self.enabled:
            return False
        who = (agent, role, ttl_ms)
        if self._who is None:
            self._who = who
        elif who != self._who:
            # several agents, roles or TTLs through this instance: their claims would take
            # turns, each releasing what the other's reports claimed. Never again here.
            self.enabled = False
            self._drop_all()
            return False
        self._n = n
        self._last_claim = time.monotonic()
        return True

    def holds(self, agent: str, role: str, ttl_ms: int) -> bool:
        """Whether leases for ``agent``, ``role`` and ``ttl_ms`` are kept, or a claim ahead
        of them is in flight (a caller about to wait for work takes them first)."""
        return (
            self.enabled
            and self._who == (agent, role, ttl_ms)
            and (bool(self._kept) or self._flying is not None)
        )

    def gave_back(self) -> None:
        """The agent gave a lease back (a release: shutting down, a parked claim cancelled):
        its reports claim nothing ahead until it claims again."""
        self._last_claim = -1e9

    def take(self, n: int) -> list[Kept]:
        """Up to ``n`` kept leases, oldest first (an expired-by-age one is set aside)."""
        out: list[Kept] = []
        kept = self._kept
        oldest = time.monotonic() - self.max_age_s
        while kept and len(out) < n:
            since, lease = kept.popleft()
            if since < oldest:
                self._unwanted.append(lease)
            else:
                out.append(lease)
        self.handed += len(out)
        if len(out) < n:
            self._short = True
        return out

    async def take_waiting(
        self, n: int, build: Callable[[list[Kept]], Awaitable[list[Lease]]] | None = None
    ) -> tuple[list[Lease], bool]:
        """Up to ``n`` kept leases, built by ``build`` (default: :func:`leases_of`), waiting
        for the claim ahead in flight while fewer are kept; and whether they answer the call:
        all ``n``, or the claim waited for found the role drained just now (else the caller
        claims the rest itself). Every rail that claims ahead answers its ``claim_many`` so."""
        make = build or leases_of
        got = await make(self.take(n))
        waited = False
        while len(got) < n and self._flying is not None:
            await self._flying.wait()
            got += await make(self.take(n - len(got)))
            waited = True
        return got, len(got) == n or (waited and self._came_short)

    def answered(self, key: str | None, fp: str, leases: list[Lease]) -> None:
        """A call under ``key`` was answered ``leases``, some of them kept ones: a replay
        under the key answers them again (:meth:`replayed`), as the rail's record would."""
        if key is None:
            return
        answers = self._answers
        answers[key] = (fp, leases)
        while len(answers) > REMEMBERED_ANSWERS:
            answers.popitem(last=False)
        self.sent(key)

    def replayed(self, key: str | None) -> tuple[str, list[Lease]] | None:
        """(fingerprint, answer) of an earlier call under ``key`` answered with kept leases."""
        return None if key is None else self._answers.get(key)

    @property
    def came_short(self) -> bool:
        """Whether the last claim ahead found fewer leases than it asked for."""
        return self._came_short

    def sent(self, key: str | None) -> None:
        """A call under ``key`` went to the server (a replay of it must too: :meth:`seen`)."""
        if key is not None:
            self._keys[key] = None
            while len(self._keys) > REMEMBERED_KEYS:
                self._keys.popitem(last=False)

    def seen(self, key: str | None) -> bool:
        """Whether a call under ``key`` came before (its replay is answered as the first)."""
        return key is not None and key in self._keys

    def lost(self, key: str, n: int) -> None:
        """The answer of the claim ahead under ``key`` (of ``n``) was lost: the next
        ``claim_many`` replays it (:meth:`take_lost`), so that no lease it made is stranded."""
        self._lost.append((key, n))

    def take_lost(self) -> list[tuple[str, int]]:
        """The claims ahead whose answers were lost (taken out)."""
        out, self._lost = self._lost, []
        return out

    async def replay_lost(self, claim: ReplayClaim) -> None:
        """Replay, under their keys, the claims ahead whose answers were lost (``claim``: the
        rail's ``claim_many`` of ``n`` under a key): what they leased is kept (or claimed now,
        if they wrote nothing), never stranded; a replay that fails leaves the rest lost."""
        lost = self.take_lost()
        while lost:
            key, n = lost[0]
            try:
                leases = await claim(key, n)
            except BaseException:
                for again in lost:
                    self.lost(*again)
                raise
            self.kept_again(leases)
            lost.pop(0)

    async def release_unwanted(self, release: Release) -> None:
        """Release the kept leases no ``claim_many`` took (:meth:`unwanted`): the run ends
        ``released``, nothing counted; a release that fails leaves the lease to expire with
        its TTL."""
        for kept in self.unwanted():
            try:
                await release(kept.ref, AHEAD_RELEASED)
            except TrackerError as exc:
                log.debug("a lease claimed ahead was not released: %s", exc)

    def kept_again(self, leases: Sequence[Kept]) -> None:
        """Leases of a lost claim ahead, answered by its replay: kept."""
        now = time.monotonic()
        self._kept.extend((now, lease) for lease in leases)

    def give_back(self, leases: Sequence[Lease]) -> None:
        """Leases taken for a call that failed: kept again, first in line."""
        now = time.monotonic()
        self._kept.extendleft((now, lease) for lease in reversed(leases))
        self.handed -= len(leases)

    @property
    def flying(self) -> anyio.Event | None:
        """The claim ahead in flight (None: none is)."""
        return self._flying

    def busy(self) -> bool:
        """Whether an agent is draining a role through this instance now (its claims are
        answered here: a ``finish_many`` waits for no claim to pair with)."""
        return (
            self.enabled
            and self._who is not None
            # a worker claiming one lease at a time is not claimed ahead for: it would hold
            # twice what it runs (its finishes pair with its claims, :mod:`.pairing`)
            and self._n >= 2
            and time.monotonic() - self._last_claim <= BUSY_S
        )

    def wanted(self) -> tuple[str, str, int, int] | None:
        """(agent, role, ttl, n) for a claim ahead riding with a ``finish_many`` now, or None:
        not busy, one already in flight, or two batches kept already. ``n`` is one batch (what
        the last ``claim_many`` asked for), two after a ``claim_many`` found too few kept (the
        reserve is being built), never more than two batches kept and in flight together: the
        worker's next claim finds one batch kept whichever of its reports and its claim comes
        first, so each report carries a claim and no claim goes alone."""
        who = self._who
        if who is None or self._flying is not None or not self.busy():
            return None
        batch = self._n
        n = 2 * batch if self._short else batch
        self._short = False
        n = min(n, 2 * batch - len(self._kept), MAX_CLAIM_MANY)
        if n < max(1, batch // 2):
            return None
        agent, role, ttl = who
        return agent, role, ttl, n

    def started(self) -> None:
        """A claim ahead was sent."""
        self._flying = anyio.Event()
        self.sent_n += 1

    def landed(self, who: tuple[str, str, int], n: int, leases: Sequence[Kept]) -> None:
        """The claim ahead in flight (of ``n``) was answered (``leases``; empty when it
        failed)."""
        flying, self._flying = self._flying, None
        self._came_short = len(leases) < n
        if who == self._who and self.enabled:
            now = time.monotonic()
            self._kept.extend((now, lease) for lease in leases)
        else:
            self._unwanted.extend(leases)
        self.claimed += len(leases)
        if flying is not None:
            flying.set()

    def expire(self) -> bool:
        """Set aside the kept leases older than :attr:`max_age_s` (to be given back,
        :meth:`unwanted`); whether any lease is to be given back now."""
        kept = self._kept
        oldest = time.monotonic() - self.max_age_s
        while kept and kept[0][0] < oldest:
            self._unwanted.append(kept.popleft()[1])
        return bool(self._unwanted)

    def unwanted(self) -> list[Kept]:
        """The leases to give back now (taken out)."""
        out, self._unwanted = self._unwanted, []
        return out

    def close(self) -> None:
        """Stop claiming ahead: every lease still kept is to be given back (:meth:`unwanted`)."""
        self.enabled = False
        self._drop_all()

    def _drop_all(self) -> None:
        self._unwanted.extend(lease for _, lease in self._kept)
        self._kept.clear()
