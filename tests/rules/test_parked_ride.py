"""A parked claim rides the create that brings its work (:mod:`tracker_client.rules.parked`):
the create's own write leases the new task to the claim waiting for it, so a pickup costs one
write, not a create, a wake-up and a claim. Over the embedded rail (the served rail's storage),
a real SQLite file: the ride keeps the claim's record (a retry under the key, even on a new
instance of the rail, answers the same lease), a create of another role's task or a create that
fails leaves the claim waiting as before, and a refused ride refuses nothing of the create."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from tests.contract.support import make_pipeline, new_task
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.models import Lease

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

OTHER_ROLE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "reviewer"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


async def _boardable(rail: EmbeddedTracker, key: str) -> None:
    """Until the parked claim of ``key`` waits for work (scheduling passes, no timer)."""
    parked = rail._parked
    with anyio.fail_after(10):
        while key not in parked._live or not parked._live[key].boardable:
            await anyio.lowlevel.checkpoint()


async def _park_then(
    rail: EmbeddedTracker, key: str, then: object, *, wait_ms: int = 20_000
) -> list[Lease]:
    """Park a claim for role ``coder`` under ``key``; once it waits, run ``then()``; its
    leases."""
    got: list[Lease] = []

    async def park() -> None:
        got.extend(await rail.parked_claim("w1", "coder", 60_000, 1, wait_ms, idempotency_key=key))

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(park)
            await _boardable(rail, key)
            await then()  # type: ignore[operator]
    return got


async def test_the_create_leases_its_task_to_the_waiting_claim(
    rail: EmbeddedTracker, tmp_path: Path
) -> None:
    pid = await make_pipeline(rail)
    key = str(uuid.uuid4())
    created: list[str] = []

    async def create() -> None:
        created.append(await rail.create_task(new_task(pid, "late")))

    [lease] = await _park_then(rail, key, create)
    assert lease.task.id == created[0]
    assert rail._parked.rides == 1
    # The ride kept the claim's record: a retry under the key, here and on a new instance of
    # the rail (a restarted server), answers the same lease.
    [again] = await rail.parked_claim("w1", "coder", 60_000, 1, 0, idempotency_key=key)
    assert again.lease_token == lease.lease_token
    other = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        [replayed] = await other.parked_claim("w1", "coder", 60_000, 1, 0, idempotency_key=key)
    finally:
        await other.aclose()
    assert (replayed.lease_id, replayed.lease_token) == (lease.lease_id, lease.lease_token)
    assert (await rail.transition(lease, "complete")).new_stage == "done"


async def test_a_batch_create_takes_as_many_claims_as_it_makes_tasks(
    rail: EmbeddedTracker,
) -> None:
    pid = await make_pipeline(rail)
    keys = [str(uuid.uuid4()) for _ in range(3)]
    got: dict[str, list[Lease]] = {}

    async def park(key: str) -> None:
        got[key] = await rail.parked_claim("w1", "coder", 60_000, 1, 20_000, idempotency_key=key)

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            for key in keys:
                tg.start_soon(park, key)
            for key in keys:
                await _boardable(rail, key)
            ids = await rail.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
            assert rail._parked.rides == 2  # the third claim was left to its own look
            while len(got) < 2:
                await anyio.lowlevel.checkpoint()
            for key in set(keys) - set(got):
                assert (await rail.cancel_parked_claim(idempotency_key=key)).released == 0
    leased = sorted(lease.task.id for leases in got.values() for lease in leases)
    assert leased == sorted(ids)
    assert sorted(len(leases) for leases in got.values()) == [0, 1, 1]


async def test_another_roles_task_leaves_the_claim_waiting(rail: EmbeddedTracker) -> None:
    mine, other = await make_pipeline(rail), await make_pipeline(rail, OTHER_ROLE)
    key = str(uuid.uuid4())
    created: list[str] = []

    async def create_both() -> None:
        await rail.create_task(new_task(other, "not mine"))
        await _boardable(rail, key)  # it rode, leased nothing, and waits again
        created.append(await rail.create_task(new_task(mine, "mine")))

    [lease] = await _park_then(rail, key, create_both)
    assert lease.task.id == created[0]
    assert rail._parked.rides == 1


async def test_a_failed_create_leaves_the_claim_to_look_on_its_own(rail: EmbeddedTracker) -> None:
    pid = await make_pipeline(rail)
    key = str(uuid.uuid4())
    created: list[str] = []

    async def fail_then_create() -> None:
        with pytest.raises(NotFound):
            await rail.create_task(new_task("no-such-pipeline", "x"))
        await _boardable(rail, key)
        created.append(await rail.create_task(new_task(pid, "y")))

    [lease] = await _park_then(rail, key, fail_then_create)
    assert lease.task.id == created[0]


async def test_a_refused_ride_refuses_nothing_of_the_create(rail: EmbeddedTracker) -> None:
    """The ride's claim refused (injected: the rules refuse nothing here on demand) is rolled
    back alone; the create commits and the claim, woken, leases the task on its own."""
    pid = await make_pipeline(rail)
    key = str(uuid.uuid4())
    created: list[str] = []

    def refused(_ctx: object, _key: str) -> list[Lease]:
        raise ValidationFailed("refused on purpose", code="invalid_request")

    async def create() -> None:
        rail._parked._live[key].ride = refused
        created.append(await rail.create_task(new_task(pid, "t")))

    [lease] = await _park_then(rail, key, create)
    assert lease.task.id == created[0]
    assert rail._parked.rides == 0
    assert (await rail.get_task(created[0])).id == created[0]
