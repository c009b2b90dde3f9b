"""A run's failure report as one request where the rail has ``finish``: the ``error`` event and
the fail together, written all or nothing (else the event, then the fail, as two writes); where
the worker batches reports (``finish_many``), the pair is one item of the batch.

Called by :class:`~worker.run.report.FinalReport` for a failed run. What is written is scrubbed
of known secrets as the session's own writes are; event data the rail refuses (too large) falls
back to the two writes, where the session turns it into a marker. It may touch the lease's
writes only, through the session's retrying calls.
"""

from __future__ import annotations

from typing import Any, Protocol, cast, runtime_checkable

from tracker_client.capabilities import LeaseRef
from tracker_client.errors import ValidationFailed
from tracker_client.models import FailResult
from tracker_client.nulltickets.batch_models import FinishResult
from worker.lease.session import LeaseSession

__all__ = ["fail_with_event"]


@runtime_checkable
class _Finishing(Protocol):
    async def finish(
        self,
        lease: LeaseRef,
        *,
        events: Any = (),
        transition: Any = None,
        fail: Any = None,
        idempotency_key: str | None = None,
    ) -> FinishResult: ...


async def fail_with_event(
    session: LeaseSession,
    kind: str,
    data: Any,
    error: str,
    *,
    usage: Any,
    retryable: bool,
    budget_s: float,
) -> FailResult:
    """Write the ``kind`` event and fail the run: one ``finish`` where the rail has it (in the
    worker's batch of reports where it batches them)."""
    tracker = session.tracker
    batched = session.reports is not None
    if batched or (
        isinstance(tracker, _Finishing) and "finish" in (await tracker.capabilities()).extensions
    ):
        scrub = session.scrub.get()
        event = {"kind": scrub.text(kind), "data": scrub.data(data)}
        body = {"error": scrub.text(error), "usage": scrub.data(usage), "retryable": retryable}
        try:
            if batched:
                result = await session.finish_item((event,), body, budget_s)
            else:
                finishing = cast(_Finishing, tracker)
                result = await session.calls.write(
                    "fail",
                    lambda key: finishing.finish(
                        session.ref, events=[event], fail=body, idempotency_key=key
                    ),
                    budget_s=budget_s,
                )
        except ValidationFailed:
            pass  # the event's data, refused: the two writes below make it a marker
        else:
            assert result.fail is not None
            return result.fail
    await session.add_event(kind, data)
    return await session.fail(error, usage=usage, retryable=retryable, budget_s=budget_s)
