"""``EmbeddedTracker``: the :class:`~tracker_client.protocol.Tracker` on a local SQLite file.

It is :class:`~tracker_client.rules.rail.Rail` (every operation, once, over the rules) on the
SQLite engine (:class:`~.engine.SqliteEngine`): opening the file and declaring what the rail can
do are its own, and claiming ahead (:mod:`tracker_client.ahead`, option ``claim_ahead``, on by
default). While one agent drains a role with keyless ``claim_many`` calls (a worker's: its
answers cannot be lost), each ``finish_many`` of its runs also claims its batch after next in
the same commit, and its next ``claim_many`` is answered from those leases without a write. A
worker's runs then no longer wait for the database thread's transaction between batches: they
overlap it (a 1-process drain's throughput was bounded by that wait: 100 us more per batch on
the database thread, GIL held or not, cost ~12-16 % of tasks/s; docs/benchmarks.md). A caller
that keys its claims (a served rail's clients) is never claimed ahead for. A kept lease no
claim takes (at close, after 1 s, when another agent, role or TTL claims) is withdrawn, not
released: no run of it is left and the task's next run is the attempt it would have been, so
an executor never sees attempt 2 of a task whose attempt 1 never ran.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Self

import anyio
import anyio.lowlevel

from tracker_client.ahead import AHEAD_RELEASED, ClaimAhead
from tracker_client.capabilities import EMBEDDED, Capabilities, LeaseHandle, LeaseRef
from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome, per_state_of
from tracker_client.contract.extensions import EXTENSIONS
from tracker_client.contract.parked_models import check_parked
from tracker_client.embedded.db import Database
from tracker_client.embedded.engine import SqliteEngine
from tracker_client.errors import ConfigError, TrackerError
from tracker_client.models import Lease, ReleaseResult
from tracker_client.rules.claim_many import check_n
from tracker_client.rules.claims import check_ttl
from tracker_client.rules.engine import Clock, wall_ms
from tracker_client.rules.options import parse_options
from tracker_client.rules.parked import give_back_all
from tracker_client.rules.rail import Rail
from tracker_client.sweeps import SweepCounts

__all__ = ["EmbeddedTracker"]

log = logging.getLogger("backlog_worker.tracker")


#: What the embedded rail declares: :data:`~tracker_client.capabilities.EMBEDDED`'s powers and
#: every extension of the wire contract (it implements each operation of the table).
_CAPABILITIES = replace(EMBEDDED, extensions=frozenset(EXTENSIONS))


class EmbeddedTracker(Rail[SqliteEngine]):
    """The embedded SQLite tracker. Create it with ``await EmbeddedTracker.open(path)``."""

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        clock: Clock | None = None,
        sweeps: SweepCounts | None = None,
        **options: Any,
    ) -> Self:
        """Open (creating and migrating if needed) the tracker database at ``path``.

        Options (strings from a URL are coerced): ``synchronous`` (``NORMAL``; ``FULL`` for
        power-loss durability), ``busy_timeout_ms`` (5000), ``max_backlog_depth`` (100000, 0 =
        unlimited), ``role_backlog_depth`` (role -> cap), ``max_stale_attempts`` (3),
        ``idempotency_ttl_s`` (86400), ``poll_interval_s`` (0.05), ``retention_days`` (30, 0 =
        keep finished tasks forever). ``clock`` returns epoch ms. ``sweeps``: where every
        committed sweep of expired leases is counted (:mod:`tracker_client.sweeps`).
        Raises ``ConfigError`` for a bad option, ``TrackerCorrupt`` for a file that is not ours.
        """
        if clock is not None and not callable(clock):
            raise ConfigError(
                "embedded tracker option clock: must be a callable returning epoch ms"
            )
        opts = parse_options(options)
        if not isinstance(path, str) or not path:
            raise ConfigError("embedded tracker: the database path is empty")
        db = await Database.open(
            path, synchronous=opts.synchronous, busy_timeout_ms=opts.busy_timeout_ms
        )
        tracker = cls(SqliteEngine(db, opts.poll_interval_s), opts, clock or wall_ms, sweeps)
        tracker._ahead = ahead = ClaimAhead(enabled=opts.claim_ahead)
        # a report of a worker answered from kept leases waits for no claim to pair with (a
        # claim ahead in flight was handed over with its own reports, at once)
        tracker.engine.pairing = lambda: not ahead.busy()
        return tracker

    _ahead: ClaimAhead
    #: Leases given back through :meth:`release` (claims ahead in flight compare it).
    _gave = 0

    async def claim_many(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        *,
        concurrency: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
    ) -> list[Lease]:
        """Up to ``n`` leases of ``agent_role`` (see :meth:`Rail.claim_many`); a worker's
        plain claim (no key, no limits) is answered first from the leases its last reports
        claimed ahead (:mod:`tracker_client.ahead`)."""
        ahead = self._ahead
        if not (
            idempotency_key is None
            and not per_state_of(dict(concurrency) if concurrency is not None else None)
            and _plain(agent_id, agent_role, lease_ttl_ms, n)
            and ahead.asked(agent_id, agent_role, lease_ttl_ms, n)
        ):
            # kept leases this call does not take (another agent or TTL stopped claiming
            # ahead; or too old): given back first, claimable by this very claim
            await self._give_back_kept()
            return await super().claim_many(
                agent_id,
                agent_role,
                lease_ttl_ms,
                n,
                concurrency=concurrency,
                idempotency_key=idempotency_key,
            )
        got, done = await ahead.take_waiting(n)
        await ahead.release_unwanted(self._withdraw)
        if done:
            return got
        try:
            found = await super().claim_many(agent_id, agent_role, lease_ttl_ms, n - len(got))
        except BaseException:
            ahead.give_back(got)
            raise
        return got + found

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """Each item written as ``finish`` would (see :meth:`Rail.finish_many`); while a worker
        drains a role, the same commit claims its batch after next, kept for its next
        ``claim_many`` (:mod:`tracker_client.ahead`)."""
        ahead = self._ahead
        wanted = ahead.wanted()
        if wanted is None:
            out = await super().finish_many(items)
        else:
            out = await self._finish_and_claim(items, *wanted)
        if ahead.expire():  # kept too long while the worker reported: claimable again
            await ahead.release_unwanted(self._withdraw)
        return out

    async def _finish_and_claim(
        self, items: Sequence[FinishItem], agent: str, role: str, ttl_ms: int, n: int
    ) -> list[FinishManyOutcome]:
        """:meth:`Rail.finish_many` of ``items`` and a claim of ``n`` for the agent's next
        batches, written in one transaction after them, handed to the database thread as one
        job and answered with one wake-up of the loop. The claim's leases are kept
        (:class:`ClaimAhead`); a claim the rail refuses claims nothing, and the next
        ``claim_many`` claims for itself."""
        finish = self._write_job("finish_many", self._finish_many_op(items))
        claim = self._write_job(
            "claim_many", self._claim_many_op(agent, role, ttl_ms, n, None, None)
        )
        ahead = self._ahead
        ahead.started()
        leases: list[Lease] = []
        gave = self._gave
        try:
            (done, out), (claimed, got) = await self.engine.write_both(
                (finish.where, finish.job, finish.committed),
                (claim.where, claim.job, claim.committed),
            )
            for write, ok, value in ((finish, done, out), (claim, claimed, got)):
                if ok:
                    self._written(write, value)
                else:
                    self._write_failed(write.where)
            if claimed:
                leases = got
            if not done:
                raise out
            if not claimed and not isinstance(got, TrackerError):
                raise got  # not the rail's answer: a fault, as the reports' own would be
        finally:
            # a lease granted is never dropped. The agent gave a lease back meanwhile (it is
            # stopping): none is kept.
            stale = self._gave != gave
            ahead.landed((agent, role, ttl_ms), n, [] if stale else leases)
            if stale and leases:
                with anyio.CancelScope(shield=True):
                    for lease in leases:
                        await self._withdraw_quietly(lease)
        result: list[FinishManyOutcome] = out
        return result

    async def _withdraw(self, lease: LeaseHandle, reason: str) -> bool:
        """Give back a lease claimed ahead that no claim took (``reason``: why, for the
        interface :meth:`ClaimAhead.release_unwanted` calls): withdrawn, not released, so it
        leaves no run and the task's next run is the attempt it would have been
        (:meth:`Rail.withdraw`). False: the lease had moved on."""
        return await self.withdraw(lease)

    async def _withdraw_quietly(self, lease: Lease) -> None:
        """:meth:`_withdraw`; one that fails is left to the lease's TTL (logged at debug)."""
        try:
            await self._withdraw(lease.ref, AHEAD_RELEASED)
        except TrackerError as exc:
            log.debug("a lease claimed ahead was not withdrawn: %s", exc)

    async def release(
        self,
        lease: LeaseRef,
        reason: str = "worker_shutdown",
        *,
        idempotency_key: str | None = None,
    ) -> ReleaseResult:
        """Give the lease's task back (:meth:`Rail.release`); the agent's reports claim
        nothing ahead until it claims again (a stopping worker's reports would lease the
        tasks it is giving back)."""
        self._gave += 1  # before the release is queued: a claim ahead not sent yet sees it
        self._ahead.gave_back()
        return await super().release(lease, reason, idempotency_key=idempotency_key)

    #: A parked claim's attempt that leases nothing records nothing: an idle worker's round
    #: commits nothing, so it wakes no other process's waiter (:mod:`tracker_client.rules.parked`).
    _parked_empty_recorded = False

    async def _give_back_kept(self) -> None:
        """Give back the leases claimed ahead that the claim about to run does not take (too
        old, or kept for another agent or TTL): withdrawn first, so this claim may lease
        them."""
        self._ahead.expire()
        await self._ahead.release_unwanted(self._withdraw)

    async def _parked_attempt(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        concurrency: Mapping[str, object] | None,
        key: str,
    ) -> list[Lease]:
        """:meth:`Rail._parked_attempt`, after giving back the leases claimed ahead that it
        does not take (as a keyed :meth:`claim_many` does: claimable by this very claim)."""
        await self._give_back_kept()
        return await super()._parked_attempt(
            agent_id, agent_role, lease_ttl_ms, n, concurrency, key
        )

    async def parked_claim(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        wait_ms: int,
        *,
        concurrency: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
    ) -> list[Lease]:
        """The rail's parked claim (:meth:`Rail.parked_claim`), answered at once with leases
        claimed ahead for the agent when some are kept (a worker's last reports may claim
        its next batch after its claim found the role empty: they are not left to lapse)."""
        key = check_parked(idempotency_key, wait_ms)
        ahead = self._ahead
        if (
            not per_state_of(dict(concurrency) if concurrency is not None else None)
            and not self._parked.ended(key)  # a retry, or cancelled: the rail's record answers
            and ahead.holds(agent_id, agent_role, lease_ttl_ms)
            and _plain(agent_id, agent_role, lease_ttl_ms, n)
        ):
            got = await self.claim_many(agent_id, agent_role, lease_ttl_ms, n)
            if got and self._parked.ended(key):  # its cancel came while it claimed
                await give_back_all(got, self._give_back)
                return []
            if got:
                return got
        return await super().parked_claim(
            agent_id,
            agent_role,
            lease_ttl_ms,
            n,
            wait_ms,
            concurrency=concurrency,
            idempotency_key=key,
        )

    async def aclose(self) -> None:
        """Release the leases claimed ahead that no claim took, then close the rail."""
        ahead = self._ahead
        ahead.close()
        await ahead.release_unwanted(self._withdraw)
        await super().aclose()

    async def capabilities(self) -> Capabilities:
        """Every rule of the backlog semantics (docs/guarantees/backlog.md), in process.

        Every write commits and answers in the caller's process, and an error means nothing was
        committed, so an answer is never lost: callers need no idempotency keys (they still work).
        """
        return _CAPABILITIES


def _plain(agent: Any, role: Any, ttl_ms: Any, n: Any) -> bool:
    """Whether a claim's arguments are good (a bad one goes to the rail's claim, which refuses
    it naming what is wrong)."""
    if not (isinstance(agent, str) and agent and isinstance(role, str) and role):
        return False
    try:
        check_ttl(ttl_ms)
        check_n(n)
    except TrackerError:
        return False
    return True
