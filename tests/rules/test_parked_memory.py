"""What a rail instance remembers of its ended parked claims (:mod:`tracker_client.rules.parked`)
stays bounded in time, not only in count: an idle worker picking up one task at a time used to
keep every answer's lease until the 4,096th (~5.5 KiB each). Over the embedded rail on a real
SQLite file; the instance's clock for that memory is a plain counter the test moves."""

from __future__ import annotations

import uuid

import pytest

from tests.contract.support import make_pipeline, new_task
from tracker_client.embedded import EmbeddedTracker
from tracker_client.rules.parked import ENDED_FOR_S, ParkedClaims

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class _Clock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s


async def test_an_ended_claim_is_answered_from_memory_then_from_the_record(
    rail: EmbeddedTracker,
) -> None:
    clock = _Clock()
    rail._parked = parked = ParkedClaims(now=clock)
    pid = await make_pipeline(rail)
    await rail.create_task(new_task(pid, "a"))
    key = str(uuid.uuid4())
    [lease] = await rail.parked_claim("w1", "coder", 60_000, 1, 0, idempotency_key=key)
    clock.s += ENDED_FOR_S - 1
    assert parked.ended(key)  # a retry now is answered from memory
    [again] = await rail.parked_claim("w1", "coder", 60_000, 1, 0, idempotency_key=key)
    assert (again.lease_id, again.lease_token) == (lease.lease_id, lease.lease_token)
    clock.s += ENDED_FOR_S - 1
    assert parked.ended(key)  # the retry asked for it: remembered from then on
    clock.s += 2
    assert not parked.ended(key)  # forgotten, lease and all
    # a retry later than that replays the rail's record of the attempt: the same lease
    [replayed] = await rail.parked_claim("w1", "coder", 60_000, 1, 0, idempotency_key=key)
    assert (replayed.lease_id, replayed.lease_token) == (lease.lease_id, lease.lease_token)
    assert (await rail.transition(lease, "complete")).new_stage == "done"


async def test_one_pickup_at_a_time_keeps_a_window_of_answers(rail: EmbeddedTracker) -> None:
    clock = _Clock()
    rail._parked = parked = ParkedClaims(now=clock)
    pid = await make_pipeline(rail)
    pickups = int(ENDED_FOR_S) * 3
    for i in range(pickups):  # an idle worker given a task a second
        await rail.create_task(new_task(pid, f"t{i}"))
        key = str(uuid.uuid4())
        [lease] = await rail.parked_claim("w1", "coder", 60_000, 1, 0, idempotency_key=key)
        assert (await rail.transition(lease, "complete")).new_stage == "done"
        clock.s += 1
    remembered = [k for k in list(parked._ended) if parked.ended(k)]
    assert 0 < len(remembered) <= ENDED_FOR_S + 1
    assert len(parked._ended) <= ENDED_FOR_S + 1


async def test_a_cancel_that_overtook_its_claim_still_stops_it_within_the_window(
    rail: EmbeddedTracker,
) -> None:
    clock = _Clock()
    rail._parked = ParkedClaims(now=clock)
    pid = await make_pipeline(rail)
    await rail.create_task(new_task(pid, "a"))
    key = str(uuid.uuid4())
    assert (await rail.cancel_parked_claim(idempotency_key=key)).released == 0
    clock.s += ENDED_FOR_S - 1
    assert await rail.parked_claim("w1", "coder", 60_000, 1, 0, idempotency_key=key) == []
