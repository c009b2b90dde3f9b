"""Claiming ahead on the served rail: a busy worker's next batch claimed with its reports.

With one worker process on ``tracker serve``, a batch's life was strictly serial: the worker
ran ten no-op runs, sent their reports with the claim of the slots they freed (extension
``finish_claim``, :mod:`.pairing`), then waited while the server wrote both; the worker's CPU and
the server's alternated, neither overlapping the other (docs/benchmarks/served.md).
Here, as the PostgreSQL rail does in its own process (its ``claim_ahead``),
the claim riding with a busy worker's reports is for the batch *after* the next, and its leases
are kept in this client: the worker's next ``claim_many`` is answered from them at once, and
those runs go while the server writes the reports and the claim that will refill what was
kept. Nothing new goes on the wire: the riding claim is a ``claim_many`` of ``finish_claim``,
under an idempotency key of its own.

The bookkeeping is :class:`~tracker_client.ahead.ClaimAhead`'s (every rail's that claims
ahead: when a worker is busy, how much rides with each report, which leases are kept and for
how long, replays of keys answered from them, claims whose answers were lost). What is this
client's: the worker's rhythm (a claim came since its last report) decides whether a report
carries a claim, and three reports with no claim between them give back what is kept.

What a kept lease promises is what any lease promises (the ``Lease`` says when it ends, and
the worker's clock keeps the earlier of that and its own count, docs/guarantees/worker.md). It
is handed out within :data:`~tracker_client.ahead.MAX_AGE_S` or given back, and every lease
still kept is given back when the client closes: withdrawn where the server lists
``withdraw`` (no run left, the attempt count unchanged), else released (the run ends
``released``, nothing counted); a process killed meanwhile leaves them to expire with their
TTL, as it leaves its runs' leases. A ``claim_many`` with per-state limits, without an
idempotency key, or of a worker claiming one lease at a time is never answered from kept
leases nor claimed ahead for; a second agent, role or TTL through one client turns claiming
ahead off for good. A claim ahead whose answer is lost is replayed under its key by the next
``claim_many`` (the server's record answers the same leases): no lease it made is stranded.

May touch: the wire (the ``finish_many`` request with its riding claim, a plain
``claim_many``, ``withdraw`` or ``release``, ``get_task`` for a replay's live check); no
configuration.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence

import anyio

from tracker_client.ahead import ClaimAhead
from tracker_client.contract.batch_models import MAX_CLAIM_MANY, FinishItem, FinishManyOutcome
from tracker_client.contract.contract_types import MAX_LEASE_TTL_MS
from tracker_client.errors import Conflict, TrackerUnavailable
from tracker_client.models import Lease
from tracker_client.nulltickets.batching import items_json, outcomes_of, send_items
from tracker_client.nulltickets.leases import withdraw
from tracker_client.nulltickets.pairing import Pairing
from tracker_client.nulltickets.reads import get_task
from tracker_client.nulltickets.wire import Wire

__all__ = ["ClaimingAhead", "ServedClaimAhead"]

#: Sends a ``claim_many`` of ``n`` leases the ordinary way (riding or alone: :mod:`.pairing`).
SendClaim = Callable[[int], Awaitable[list[Lease]]]


class ServedClaimAhead(ClaimAhead):
    """:class:`~tracker_client.ahead.ClaimAhead` that can drop what it keeps."""

    def drop_kept(self) -> None:
        """Set every kept lease aside, to be given back (:meth:`unwanted`): no claim came for
        them."""
        self._drop_all()


def _plain(agent: object, role: object, ttl_ms: object, n: object) -> bool:
    """Whether a claim's arguments are good (a bad one goes to the server, which names what
    is wrong, as before)."""
    return (
        isinstance(agent, str)
        and bool(agent)
        and isinstance(role, str)
        and bool(role)
        and type(ttl_ms) is int
        and 1 <= ttl_ms <= MAX_LEASE_TTL_MS
        and type(n) is int
        and 1 <= n <= MAX_CLAIM_MANY
    )


def _fingerprint(agent: str, role: str, ttl_ms: int, n: int) -> str:
    return f"{agent}\x00{role}\x00{ttl_ms}\x00{n}"


class ClaimingAhead:
    """A served client's claims ahead (see the module): its ``claim_many`` and ``finish_many``
    go through here where the server advertises ``finish_claim``."""

    def __init__(self, wire: Wire, pairing: Pairing) -> None:
        self._wire = wire
        self._pairing = pairing
        #: The kept leases and when to claim ahead.
        self.book = ServedClaimAhead()
        # Keys of claims ahead: unique per client (a replay must find this one's record).
        self._prefix = f"claim-ahead-{uuid.uuid4().hex}"
        # The worker's rhythm: whether a report came before, and how many since the last claim.
        self._reported = False
        self._unclaimed = 0

    async def claim_many(
        self, agent: str, role: str, ttl_ms: int, n: int, key: str | None, send: SendClaim
    ) -> list[Lease]:
        """Up to ``n`` leases: kept ones first (waiting for the claim ahead in flight, if one
        is), the rest by ``send``. A replay of a key answered from kept leases answers the same
        leases still running (``Conflict`` for other arguments), as the server's record would."""
        book = self.book
        earlier = book.replayed(key)
        if earlier is not None:
            return await self._replay_kept(key, _fingerprint(agent, role, ttl_ms, n), *earlier)
        got: list[Lease] = []
        if (
            not book.seen(key)
            and _plain(agent, role, ttl_ms, n)
            and book.asked(agent, role, ttl_ms, n)
        ):
            self._unclaimed = 0
            await book.replay_lost(
                lambda key, k: self._wire.generic(
                    "claim_many", agent_id=agent, agent_role=role, lease_ttl_ms=ttl_ms, n=k,
                    idempotency_key=key,
                )
            )  # fmt: skip
            got, done = await book.take_waiting(n)
            if done:
                # all asked for, or the claim waited for found the role drained just now
                await self.give_back()
                if got:
                    book.answered(key, _fingerprint(agent, role, ttl_ms, n), got)
                return got
        book.sent(key)
        try:
            await self.give_back()  # kept leases no longer wanted: claimable again
            found = await send(n - len(got))
        except BaseException:
            book.give_back(got)
            raise
        return got + found

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """The items' outcomes: sent with a claim ahead while the worker is busy (or alone
        when enough is kept), else as :mod:`.pairing` sends them."""
        book = self.book
        # Claimed ahead for only while reports and claims alternate: a claim came since the
        # last report. Three reports with no claim between them: the worker claims no more
        # (stopping, or between bursts): what it kept is given back now, not at its close.
        rhythm = self._reported and not self._unclaimed
        self._reported = True
        self._unclaimed += 1
        if self._unclaimed > 2:
            book.drop_kept()
        wanted = book.wanted() if rhythm else None
        if wanted is not None:
            outcomes = await self._with_claim(items, *wanted)
        elif rhythm and book.busy():  # enough kept: no claim will come to ride along
            outcomes = await send_items(self._wire, items_json(items), len(items))
        else:
            outcomes = await self._pairing.finish_many(items)
        if book.expire():  # kept too long while the worker reported: claimable again
            await self.give_back()
        return outcomes

    async def _with_claim(
        self, items: Sequence[FinishItem], agent: str, role: str, ttl_ms: int, n: int
    ) -> list[FinishManyOutcome]:
        raw = items_json(items)  # refused here, before a claim is started, if it is refused
        book = self.book
        book.started()
        key = f"{self._prefix}-{book.sent_n}"
        riding = {
            "agent_id": agent,
            "agent_role": role,
            "lease_ttl_ms": ttl_ms,
            "n": n,
            "idempotency_key": key,
        }
        leases: list[Lease] = []
        # shielded from the send to the leases kept: a lease granted is never dropped
        with anyio.CancelScope(shield=True):
            try:
                try:
                    answer = await self._pairing.send_riding(raw, riding)
                except TrackerUnavailable:
                    book.lost(key, n)  # the next claim_many replays it
                    raise
                entry = answer.claim
                if entry is not None and entry.status == 200 and entry.leases is not None:
                    leases = entry.leases
            finally:
                book.landed((agent, role, ttl_ms), n, leases)
        return outcomes_of(answer, len(items))

    async def _replay_kept(
        self, key: str | None, fp: str, first: str, leases: list[Lease]
    ) -> list[Lease]:
        if fp != first:
            raise Conflict(
                f"idempotency key {key!r} was already used for a different claim_many request",
                code="idempotency_conflict",
            )
        live: list[Lease] = []
        for lease in leases:
            task = await get_task(self._wire, lease.task_id)
            run = task.latest_run
            if run is not None and run.id == lease.run_id and run.status == "running":
                live.append(lease)
        return live

    async def give_back(self) -> None:
        """Give back the kept leases no ``claim_many`` took: withdrawn (no run left, the attempt
        count unchanged) where the server lists ``withdraw``, else released (the run ends
        ``released``, nothing counted); one that fails is left to expire with its TTL."""
        await self.book.release_unwanted(lambda ref, reason: withdraw(self._wire, ref, reason))

    async def aclose(self) -> None:
        """Release every lease still kept (at the client's close)."""
        self.book.close()
        await self.give_back()
