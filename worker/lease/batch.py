"""The final reports of runs that end together, sent as one ``finish_many``.

Ten no-op runs of one claim end within a millisecond of each other; each would send its own
transition (a request, a transaction). Where the rail declares ``finish_many``, a run's final
transition or fail goes through the worker's one :class:`ReportBatcher` instead, which sends
what is waiting as one call: *natural batching*, with no timer. A report that finds no batch in
flight is sent after one scheduling pass (so the runs ending in that same pass join it; a lone
run waits for nothing more); reports arriving while one is in flight
wait for it and go together in the next, sent by the first of them (the batch's leader, woken
when the one before is answered). Throughput sets the batch size; latency is one round trip at
most.

Each report keeps its own semantics: its own lease token and idempotency key (the session's
retry of a report resends the same item, and the rail answers a replay from its record), its
own outcome (a refused item is raised to its own caller as the plain call would raise it; the
others are written), its own deadline (a caller cancelled while waiting, or before its batch
is taken, leaves the queue unsent). A batch whose answer is lost (a transport failure, the
leader cancelled mid-call) raises a retryable ``TrackerUnavailable`` to each of its callers,
whose retries carry the same keys.

May touch: the tracker's ``finish_many`` only (given as a function); no configuration.
"""

from __future__ import annotations

from asyncio import AbstractEventLoop
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from tracker_client.contract.batch_models import (
    MAX_FINISH_MANY,
    FinishItem,
    FinishManyOutcome,
    FinishResult,
)
from tracker_client.errors import TrackerError, TrackerUnavailable
from worker.wake import Wake, running_loop

if TYPE_CHECKING:
    from tracker_client.protocol import FinishesMany

__all__ = ["ReportBatcher", "SendMany", "batcher_for"]

#: The rail's ``finish_many``: items in, one outcome per item out.
SendMany = Callable[[Sequence[FinishItem]], Awaitable[list[FinishManyOutcome]]]


class _Pending:
    """One report waiting for its batch: its item, its outcome once answered, its wake-up."""

    __slots__ = ("item", "outcome", "wake")

    def __init__(self, item: FinishItem) -> None:
        self.item = item
        self.outcome: FinishManyOutcome | None = None
        self.wake: Wake | None = None

    def wake_up(self) -> None:
        if self.wake is not None:
            self.wake.set()


class ReportBatcher:
    """Sends reports waiting together as one ``finish_many`` (see the module docstring)."""

    def __init__(self, send: SendMany, *, max_items: int = MAX_FINISH_MANY) -> None:
        """``send``: the rail's ``finish_many``; ``max_items``: the most reports per call."""
        if not 1 <= max_items <= MAX_FINISH_MANY:
            raise ValueError(f"max_items: 1 to {MAX_FINISH_MANY}, got {max_items}")
        self._send = send
        self._max = max_items
        self._queue: list[_Pending] = []
        self._sending = False
        self._loop: AbstractEventLoop | None = None  # the sending leader's (wake-ups bind to it)
        #: Calls sent and items they carried (for the benchmarks and the tests).
        self.calls = 0
        self.items = 0

    async def finish(self, item: FinishItem) -> FinishResult:
        """Send ``item`` with the reports waiting beside it; its own answer, or its own error
        raised (as ``finish`` would raise it)."""
        pending = _Pending(item)
        self._queue.append(pending)
        try:
            while pending.outcome is None:
                if self._sending:
                    wake = pending.wake = Wake(self._loop)
                    await wake.wait()
                else:
                    await self._lead()
        except BaseException:
            if pending in self._queue:
                self._queue.remove(pending)
            if not self._sending and self._queue:
                self._queue[0].wake_up()  # it may have been woken to lead in our place
            raise
        outcome = pending.outcome
        if isinstance(outcome, FinishResult):  # (the answer's own class first: no fallback
            return outcome  # lookup of ``__class__`` through the model's attribute hook)
        raise outcome

    async def _lead(self) -> None:
        """Send the first reports of the queue as one call and hand each its outcome."""
        self._sending = True
        self._loop = running_loop()  # those waiting for this batch are in the same loop
        batch: list[_Pending] = []
        try:
            # One scheduling pass first: runs ending in this same pass (a claim's no-op runs
            # end together) join this batch instead of waiting a round trip for the next. A
            # leader cancelled by then (its lease gone, its report's deadline passed) takes
            # nothing and sends nothing: the next report waiting leads instead.
            await anyio.lowlevel.checkpoint()
            batch = self._queue[: self._max]
            del self._queue[: len(batch)]
            self.calls += 1
            self.items += len(batch)
            outcomes = await self._outcomes(batch)
            for pending, outcome in zip(batch, outcomes, strict=True):
                pending.outcome = outcome
        except BaseException:
            lost = TrackerUnavailable(
                "finish_many: the batch's answer was not read (it may have been written; "
                "a retry with the same key is answered from the rail's record)",
                code="batch_interrupted",
            )
            for pending in batch:
                if pending.outcome is None:
                    pending.outcome = lost
            raise
        finally:
            self._sending = False
            for pending in batch:
                pending.wake_up()
            if self._queue:
                self._queue[0].wake_up()  # the next batch's leader

    async def _outcomes(self, batch: list[_Pending]) -> list[FinishManyOutcome]:
        try:
            outcomes = await self._send([p.item for p in batch])
        except TrackerError as exc:  # the whole call refused or lost: each report hears it
            return [exc] * len(batch)
        if len(outcomes) != len(batch):
            lost = TrackerUnavailable(
                f"finish_many: {len(outcomes)} outcomes for {len(batch)} reports",
                code="invalid_response",
            )
            return [lost] * len(batch)
        return outcomes


def batcher_for(tracker: FinishesMany, extensions: frozenset[str]) -> ReportBatcher | None:
    """The worker's batcher where the rail declares ``finish_many`` (else None: each report
    is its own request, as on a plain NullTickets server). Chosen once, at start-up, from the
    declared extensions."""
    if "finish_many" not in extensions:
        return None
    return ReportBatcher(tracker.finish_many)
