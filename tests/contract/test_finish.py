"""``finish`` (extension ``finish``): a run's last events and its transition or fail, one write.

Run over every rail that declares it (embedded, the served tracker through the remote client):
the events and the report are written together or not at all, a replay under the key answers
the first answer without writing twice, and bad input is refused naming what is wrong, writing
nothing.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from tests.contract.support import claim, make_pipeline, new_task, run_events, runs_of
from tracker_client.contract.batch_models import FinishResult
from tracker_client.errors import Conflict, InvalidTransition, LeaseLost, ValidationFailed
from tracker_client.models import Lease
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.requires("finish")]


async def finish(tracker: Tracker, lease: Lease, **kw: Any) -> FinishResult:
    """``tracker.finish`` (on every rail with the extension; not in the ``Tracker`` protocol)."""
    result: FinishResult = await cast(Any, tracker).finish(lease, **kw)
    return result


async def _leased(tracker: Tracker) -> Lease:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    return await claim(tracker)


async def test_events_and_transition_in_one_write(tracker: Tracker) -> None:
    lease = await _leased(tracker)

    result = await finish(
        tracker,
        lease,
        events=[{"kind": "step", "data": {"n": 1}}, {"kind": "step", "data": {"n": 2}}],
        transition={"trigger": "complete", "expected_task_version": 1},
    )

    assert len(result.event_ids) == 2 and result.event_ids[0] < result.event_ids[1]
    assert result.transition is not None and result.transition.new_stage == "done"
    assert result.fail is None
    steps = [e.data for e in await run_events(tracker, lease.run.id) if e.kind == "step"]
    assert steps == [{"n": 1}, {"n": 2}]
    assert [r.status for r in await runs_of(tracker, lease.task.id)] == ["completed"]


async def test_events_and_fail_in_one_write(tracker: Tracker) -> None:
    lease = await _leased(tracker)

    result = await finish(
        tracker,
        lease,
        events=[{"kind": "error", "data": {"reason": "boom"}}],
        fail={"error": "boom: it broke"},
    )

    assert len(result.event_ids) == 1 and result.transition is None
    assert result.fail is not None
    errors = [e.data for e in await run_events(tracker, lease.run.id) if e.kind == "error"]
    assert errors == [{"reason": "boom"}]
    assert [r.status for r in await runs_of(tracker, lease.task.id)] == ["failed"]


@pytest.mark.parametrize(
    ("transition", "error"),
    [
        ({"trigger": "no-such-trigger"}, InvalidTransition),
        ({"trigger": "complete", "expected_task_version": 7}, Conflict),
    ],
    ids=["invalid_trigger", "stale_version"],
)
async def test_a_refused_transition_writes_no_event(
    tracker: Tracker, transition: dict[str, Any], error: type[Exception]
) -> None:
    lease = await _leased(tracker)

    with pytest.raises(error):
        await finish(tracker, lease, events=[{"kind": "step", "data": {}}], transition=transition)

    assert [e for e in await run_events(tracker, lease.run.id) if e.kind == "step"] == []
    # The lease is still held: the run can still report.
    result = await finish(tracker, lease, transition={"trigger": "complete"})
    assert result.event_ids == [] and result.transition is not None


async def test_a_replay_with_the_key_writes_once(tracker: Tracker) -> None:
    lease = await _leased(tracker)
    body: dict[str, Any] = {
        "events": [{"kind": "step", "data": {}}],
        "transition": {"trigger": "complete"},
    }

    first = await finish(tracker, lease, idempotency_key="fin-1", **body)
    again = await finish(tracker, lease, idempotency_key="fin-1", **body)

    assert again == first
    assert len([e for e in await run_events(tracker, lease.run.id) if e.kind == "step"]) == 1


async def test_a_lost_lease_is_lease_lost(tracker: Tracker) -> None:
    lease = await _leased(tracker)
    await tracker.transition(lease, "complete")

    with pytest.raises(LeaseLost):
        await finish(tracker, lease, events=[{"kind": "step"}], fail={"error": "late"})


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"events": [{"kind": "step"}]}, "transition or fail"),
        ({"transition": {"trigger": "complete"}, "fail": {"error": "x"}}, "transition or fail"),
        ({"events": [{"kind": "step"}] * 101, "transition": {"trigger": "complete"}}, "events"),
    ],
    ids=["neither", "both", "too_many_events"],
)
async def test_bad_input_is_refused_naming_it_and_writes_nothing(
    tracker: Tracker, body: dict[str, Any], named: str
) -> None:
    lease = await _leased(tracker)

    with pytest.raises(ValidationFailed, match=named):
        await finish(tracker, lease, **body)

    assert [e for e in await run_events(tracker, lease.run.id) if e.kind == "step"] == []
    assert [r.status for r in await runs_of(tracker, lease.task.id)] == ["running"]
