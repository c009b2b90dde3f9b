"""``finish_many`` (extension ``finish_many``): many runs' final reports in one write.

Run over every rail that declares it (embedded, the served tracker through the remote client,
PostgreSQL): each item is written as ``finish`` writes it (all or nothing, under its own lease
token and key), items are independent (a refused item's error comes back in its place, nothing
of it written, the others committed), a replay under the keys writes nothing twice, and bad
input is refused naming what is wrong.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from pydantic import SecretStr

from tests.contract.support import claim, make_pipeline, new_task, run_events, runs_of
from tracker_client.capabilities import LeaseHandle
from tracker_client.contract.batch_models import (
    MAX_FINISH_MANY,
    FinishItem,
    FinishManyOutcome,
    FinishResult,
)
from tracker_client.errors import Conflict, InvalidTransition, LeaseLost, ValidationFailed
from tracker_client.models import Lease
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.requires("finish_many")]

DONE = {"trigger": "complete"}


async def finish_many(tracker: Tracker, items: list[FinishItem]) -> list[FinishManyOutcome]:
    """``tracker.finish_many`` (every rail with the extension; not in the ``Tracker``
    protocol)."""
    outcomes: list[FinishManyOutcome] = await cast(Any, tracker).finish_many(items)
    return outcomes


async def _leases(tracker: Tracker, n: int) -> list[Lease]:
    pid = await make_pipeline(tracker)
    for i in range(n):
        await tracker.create_task(new_task(pid, title=f"t{i}"))
    return [await claim(tracker) for _ in range(n)]


def _done(outcome: FinishManyOutcome) -> FinishResult:
    assert isinstance(outcome, FinishResult), outcome
    return outcome


async def test_every_run_is_reported_in_one_call_in_order(tracker: Tracker) -> None:
    leases = await _leases(tracker, 3)

    outcomes = await finish_many(
        tracker,
        [
            FinishItem(lease=leases[0], transition=DONE),
            FinishItem(
                lease=leases[1], events=({"kind": "step", "data": {"n": 1}},), transition=DONE
            ),
            FinishItem(lease=leases[2], fail={"error": "boom", "retryable": False}),
        ],
    )

    assert len(outcomes) == 3
    first, second, third = (_done(o) for o in outcomes)
    assert first.transition is not None and first.transition.new_stage == "done"
    assert len(second.event_ids) == 1 and second.transition is not None
    assert third.fail is not None and third.fail.dead_lettered
    assert [e.data for e in await run_events(tracker, leases[1].run.id) if e.kind == "step"] == [
        {"n": 1}
    ]
    statuses = [[r.status for r in await runs_of(tracker, lease.task.id)] for lease in leases]
    assert statuses == [["completed"], ["completed"], ["failed"]]


@pytest.mark.parametrize(
    ("refused", "error"),
    [
        ({"trigger": "no-such-trigger"}, InvalidTransition),
        ({"trigger": "complete", "expected_task_version": 7}, Conflict),
    ],
    ids=["invalid_trigger", "stale_version"],
)
async def test_a_refused_item_writes_nothing_and_the_others_commit(
    tracker: Tracker, refused: dict[str, Any], error: type[Exception]
) -> None:
    leases = await _leases(tracker, 3)

    outcomes = await finish_many(
        tracker,
        [
            FinishItem(lease=leases[0], transition=DONE),
            FinishItem(lease=leases[1], events=({"kind": "step", "data": {}},), transition=refused),
            FinishItem(lease=leases[2], transition=DONE),
        ],
    )

    _done(outcomes[0]), _done(outcomes[2])
    assert isinstance(outcomes[1], error), outcomes[1]
    assert [e for e in await run_events(tracker, leases[1].run.id) if e.kind == "step"] == []
    assert [r.status for r in await runs_of(tracker, leases[1].task.id)] == ["running"]
    # The refused run still holds its lease: it can report again.
    (again,) = await finish_many(tracker, [FinishItem(lease=leases[1], transition=DONE)])
    assert _done(again).transition is not None


async def test_a_wrong_token_or_a_finished_run_is_lease_lost_in_its_place(
    tracker: Tracker,
) -> None:
    leases = await _leases(tracker, 3)
    await tracker.transition(leases[1], "complete")
    forged = LeaseHandle(
        lease_id=leases[2].lease_id, run_id=leases[2].run.id, lease_token=SecretStr("x" * 32)
    )

    outcomes = await finish_many(
        tracker,
        [
            FinishItem(lease=leases[0], transition=DONE),
            FinishItem(lease=leases[1], fail={"error": "late"}),
            FinishItem(lease=forged, transition=DONE),
        ],
    )

    _done(outcomes[0])
    assert isinstance(outcomes[1], LeaseLost) and isinstance(outcomes[2], LeaseLost)
    assert [r.status for r in await runs_of(tracker, leases[2].task.id)] == ["running"]


async def test_a_replay_under_the_keys_writes_once(tracker: Tracker) -> None:
    leases = await _leases(tracker, 2)
    items = [
        FinishItem(
            lease=lease,
            events=({"kind": "step", "data": {}},),
            transition=DONE,
            idempotency_key=f"fm-{i}",
        )
        for i, lease in enumerate(leases)
    ]

    first = await finish_many(tracker, items)
    again = await finish_many(tracker, items)

    assert again == first
    for lease in leases:
        assert len([e for e in await run_events(tracker, lease.run.id) if e.kind == "step"]) == 1


async def test_a_key_is_one_finish_whichever_call_carries_it(tracker: Tracker) -> None:
    """A report retried through ``finish`` after ``finish_many`` (or the reverse) is a replay."""
    (lease,) = await _leases(tracker, 1)
    (first,) = await finish_many(
        tracker, [FinishItem(lease=lease, transition=DONE, idempotency_key="fm-one")]
    )

    again = await cast(Any, tracker).finish(lease, transition=DONE, idempotency_key="fm-one")

    assert _done(first).transition == again.transition


async def test_a_run_named_twice_in_a_batch_is_written_once(tracker: Tracker) -> None:
    # As if the items were written one after the other: the second finds the lease gone.
    # (PostgreSQL writes a batch's plain transitions as one set; it must agree.)
    first, other = await _leases(tracker, 2)
    out = await finish_many(
        tracker,
        [
            FinishItem(lease=first, transition=DONE),
            FinishItem(lease=other, transition=DONE),
            FinishItem(lease=first, transition=DONE),
        ],
    )

    assert _done(out[0]).transition is not None and _done(out[1]).transition is not None
    assert isinstance(out[2], LeaseLost)
    transitions = [e for e in await run_events(tracker, first.run.id) if e.kind == "transition"]
    assert len(transitions) == 1


async def test_one_new_key_on_two_items_is_the_first_items_finish(tracker: Tracker) -> None:
    first, second = await _leases(tracker, 2)
    out = await finish_many(
        tracker,
        [
            FinishItem(lease=first, transition=DONE, idempotency_key="fm-twice"),
            FinishItem(lease=second, transition=DONE, idempotency_key="fm-twice"),
        ],
    )

    assert _done(out[0]).transition is not None
    assert isinstance(out[1], Conflict)  # the key is the first item's finish
    assert (await tracker.get_task(second.task.id)).stage != "done"


async def test_recorded_keys_among_fresh_ones_are_answered_in_their_place(
    tracker: Tracker,
) -> None:
    """One batch of plain reports: a replay answers its first answer, a key used for another
    run's report is a conflict, a key used by another operation is no replay, and the fresh
    items are written; each run moved once."""
    leases = await _leases(tracker, 5)
    pid = leases[0].task.pipeline_id
    await tracker.create_task(new_task(pid, title="keyed"), idempotency_key="fm-other-op")
    first = await finish_many(
        tracker,
        [
            FinishItem(lease=leases[0], transition=DONE, idempotency_key="fm-replayed"),
            FinishItem(lease=leases[1], transition=DONE, idempotency_key="fm-taken"),
        ],
    )

    out = await finish_many(
        tracker,
        [
            FinishItem(lease=leases[2], transition=DONE, idempotency_key="fm-fresh"),
            FinishItem(lease=leases[0], transition=DONE, idempotency_key="fm-replayed"),
            FinishItem(lease=leases[3], transition=DONE, idempotency_key="fm-taken"),
            FinishItem(lease=leases[4], transition=DONE, idempotency_key="fm-other-op"),
        ],
    )

    assert _done(out[0]).transition is not None and _done(out[3]).transition is not None
    assert out[1] == first[0]
    assert isinstance(out[2], Conflict) and out[2].code == "idempotency_conflict"
    tasks = [await tracker.get_task(lease.task.id) for lease in leases]
    assert [t.stage for t in tasks] == ["done", "done", "done", "todo", "done"]
    assert [t.task_version for t in tasks] == [2, 2, 2, 1, 2]


@pytest.mark.parametrize(
    ("item", "named"),
    [
        ({"events": ({"kind": "step"},)}, "transition or fail"),
        ({"transition": DONE, "fail": {"error": "x"}}, "transition or fail"),
        ({"events": ({"kind": "step"},) * 101, "transition": DONE}, "events"),
    ],
    ids=["neither", "both", "too_many_events"],
)
async def test_a_bad_item_is_refused_in_its_place_naming_it(
    tracker: Tracker, item: dict[str, Any], named: str
) -> None:
    leases = await _leases(tracker, 2)

    outcomes = await finish_many(
        tracker, [FinishItem(lease=leases[0], **item), FinishItem(lease=leases[1], transition=DONE)]
    )

    assert isinstance(outcomes[0], ValidationFailed) and named in str(outcomes[0])
    _done(outcomes[1])
    assert [e for e in await run_events(tracker, leases[0].run.id) if e.kind == "step"] == []
    assert [r.status for r in await runs_of(tracker, leases[0].task.id)] == ["running"]


@pytest.mark.parametrize("count", [0, MAX_FINISH_MANY + 1], ids=["empty", "too_many"])
async def test_a_batch_outside_its_limits_is_refused_writing_nothing(
    tracker: Tracker, count: int
) -> None:
    (lease,) = await _leases(tracker, 1)

    with pytest.raises(ValidationFailed, match=f"1 to {MAX_FINISH_MANY}, got {count}"):
        await finish_many(tracker, [FinishItem(lease=lease, transition=DONE)] * count)

    assert [r.status for r in await runs_of(tracker, lease.task.id)] == ["running"]
