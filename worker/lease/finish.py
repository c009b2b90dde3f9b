"""A run's failure report as one request where the rail has ``finish``: the ``error`` event and
the fail together, written all or nothing (else the event, then the fail, as two writes); where
the worker batches reports (``finish_many``), the pair is one item of the batch.

Called by :class:`~worker.run.report.FinalReport` for a failed run. What is written is scrubbed
of known secrets as the session's own writes are; event data the rail refuses (too large) falls
back to the two writes, where the session turns it into a marker. It may touch the lease's
writes only, through the session's retrying calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracker_client.errors import ValidationFailed
from tracker_client.models import FailResult
from tracker_client.protocol import Finishes
from worker.lease.session import LeaseSession

__all__ = ["fail_with_event"]


async def fail_with_event(
    session: LeaseSession,
    kind: str,
    data: Any,
    error: str,
    *,
    usage: Any,
    retryable: bool,
    budget_s: float,
    before: Sequence[tuple[str, Any]] = (),
) -> FailResult:
    """Write the run's last events ``before``, the ``kind`` event and fail the run: one item of
    the worker's batch where it batches reports, one ``finish`` where the rail has it."""
    if session.reports is not None:  # events refused there are written alone, as markers
        return await session.fail(
            error,
            usage=usage,
            retryable=retryable,
            budget_s=budget_s,
            events=(*before, (kind, data)),
        )
    await session.add_events(before)
    finisher = session.parts.finish if session.parts is not None else None
    if finisher is not None:
        scrub = session.scrub.get()
        event = {"kind": scrub.text(kind), "data": scrub.data(data)}
        body = {"error": scrub.text(error), "usage": scrub.data(usage), "retryable": retryable}
        try:
            return await _finish(session, finisher, event, body, budget_s)
        except ValidationFailed:
            pass  # the event's data, refused: the two writes below make it a marker
    await session.add_event(kind, data)
    return await session.fail(error, usage=usage, retryable=retryable, budget_s=budget_s)


async def _finish(
    session: LeaseSession,
    tracker: Finishes,
    event: dict[str, Any],
    body: dict[str, Any],
    budget_s: float,
) -> FailResult:
    result = await session.calls.write(
        "fail",
        lambda key: tracker.finish(session.ref, events=[event], fail=body, idempotency_key=key),
        budget_s=budget_s,
    )
    assert result.fail is not None
    return result.fail
