"""A ``finish_many`` and a claim ready together: one statement, one round trip, one commit.

A worker's runs end together and free their slots together, so their final reports (one
``finish_many``, :mod:`worker.lease.batch`) and the claim for the freed slots (one
``claim_many``) reach the rail a scheduling pass or two apart. Each alone is one statement in
its own transaction (:meth:`.db.Database.one_call`) and, at stock durability, its own WAL
flush: two commits per batch of runs. PgQueuer's trick is to take the next jobs in the
transaction that finishes the last ones; here it is done without a new operation on the wire.
A ``finish_many`` waits up to :data:`PASSES` scheduling passes for a claim; a claim arriving
meanwhile takes it along, and both go as ONE statement, ``bw_finish_claim_tx`` (schema 15):
the reports' moves first (so the claim sees the tasks they moved), then the claim. A claim
never waits (an idle worker's claim is not held back), and a ``finish_many`` no claim came for
goes alone, as before.

Each keeps its own semantics: its own parameters, idempotency key and answer, read back by its
own caller in the form its own statement answers. A pair that declines (either part raised
``BW001``, e.g. a replayed claim key, or met a clash: rolled back, nothing written) is sent
again as two calls, each answered exactly as it would be alone; a pair whose answer is lost
raises the same retryable ``TrackerUnavailable`` to both callers, whose retries carry their own
keys (the rail answers a replay from its record). A ``finish_many`` parked here is shielded from
cancellation, as the call itself is (:mod:`.aio`): once a claim took it, it is on its way.

The claim's caller gets its leases :data:`SETTLE_PASSES` passes after the reports' caller got
its answer: the reports' runs then count as finished before the claimed runs start (a worker
holding as many unanswered reports as it has slots keeps a finished executor's slot until its
report is answered, so the claimed runs ending first would split the next claim in two;
measured: claims of 10 went to 9 + 1).

It touches the database only through :meth:`.db.Database.one_call`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel

from tracker_client.postgres.db import Database
from tracker_client.postgres.dialect import STATEMENTS

__all__ = ["PAIR_CALL", "PASSES", "SETTLE_PASSES", "CallPairs"]

#: Scheduling passes a ``finish_many`` waits for a claim before it goes alone (the claim for
#: the slots its runs freed comes within one or two).
PASSES = 2
#: Passes between answering the reports' caller and the claim's (see the module docstring).
SETTLE_PASSES = 2
#: ``bw_finish_claim_tx``: ``bw_finish_many_tx``'s parameters, then ``bw_claim_tx``'s after
#: its wake-up ones (both statements lead with the same four).
PAIR_CALL = STATEMENTS["hot.finish_claim_tx"]
_WAKE_ARGS = 4

_ALONE = object()  # the pair could not be sent together: the parked call goes alone


class _Parked:
    """A ``finish_many`` waiting for a claim: what it sends, and its answer once sent."""

    __slots__ = ("done", "error", "params", "result", "taken")

    def __init__(self, params: Sequence[Any]) -> None:
        self.params = params
        self.taken = False
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class CallPairs:
    """Sends a ``finish_many`` and a claim that are ready together as one statement."""

    def __init__(self, db: Database, passes: int = PASSES) -> None:
        """``passes``: how long a ``finish_many`` waits for a claim (0: never paired)."""
        self._db = db
        self._passes = passes
        self._parked: _Parked | None = None
        #: Pairs sent as one statement, and pairs that declined and went as two calls (for the
        #: tests and the benchmarks).
        self.paired = 0
        self.split = 0

    async def finish(self, call: str, params: Sequence[Any], where: str) -> list[Any] | None:
        """A ``finish_many``'s statement (``bw_finish_many_tx``) as
        :meth:`.db.Database.one_call` answers it, with a claim arriving within :data:`PASSES`
        scheduling passes in the same statement."""
        if self._parked is not None or self._passes <= 0:
            return await self._db.one_call(call, params, where)
        me = self._parked = _Parked(params)
        with anyio.CancelScope(shield=True):
            for _ in range(self._passes):
                await anyio.lowlevel.checkpoint()
                if me.taken:
                    break
            if not me.taken:
                self._parked = None
                return await self._db.one_call(call, params, where)
            await me.done.wait()
        if me.error is not None:
            raise me.error
        if me.result is _ALONE:
            return await self._db.one_call(call, params, where)
        found: list[Any] | None = me.result
        return found

    async def together(
        self, call: str, params: Sequence[Any], claim: Sequence[Any], where: str
    ) -> tuple[list[Any] | None, list[Any] | None]:
        """A ``finish_many``'s statement and a claim (``bw_claim_tx``'s parameters) sent now as
        one: (the ``finish_many``'s answer as :meth:`.db.Database.one_call` gives it, the
        claimed rows). A pair that declined (nothing written) sends the ``finish_many`` alone,
        and the claim is not made: (its answer, None)."""
        rows = await self._db.one_call(
            PAIR_CALL, [*params, *claim[_WAKE_ARGS:]], "finish_many and claim"
        )
        if not rows:
            self.split += 1
            return await self._db.one_call(call, params, where), None
        self.paired += 1
        return [(rows[0][0],)], [row for row in rows if row["id"] is not None]

    async def claim(self, call: str, params: Sequence[Any], where: str) -> list[Any] | None:
        """A claim's statement (``bw_claim_tx``) as :meth:`.db.Database.one_call` answers it,
        with a waiting ``finish_many`` in the same statement."""
        parked, self._parked = self._parked, None
        if parked is None:
            return await self._db.one_call(call, params, where)
        parked.taken = True
        try:
            rows = await self._db.one_call(
                PAIR_CALL, [*parked.params, *params[_WAKE_ARGS:]], "finish_many and claim"
            )
        except BaseException as exc:
            parked.error = exc
            parked.done.set()
            raise
        if not rows:  # declined, nothing written: each goes alone, answered as it would be
            self.split += 1
            parked.result = _ALONE
            parked.done.set()
            return await self._db.one_call(call, params, where)
        self.paired += 1
        # The moves' answers as bw_finish_many_tx gives them; the claimed rows (the one row of
        # a claim that found nothing has no task).
        parked.result = [(rows[0][0],)]
        parked.done.set()
        for _ in range(SETTLE_PASSES):  # written: a cancellation must not drop the leases
            await anyio.lowlevel.cancel_shielded_checkpoint()
        return [row for row in rows if row["id"] is not None]
