"""``parked_claim`` (extension ``parked_claim``): ``claim_many`` that waits for work.

Run over every rail that declares it (the served tracker through the remote client, and
PostgreSQL): it leases work that comes while it waits, answers ``[]`` after its wait, answers
the same leases to a retry under its key, refuses a call without a key (or with a wait
outside 0..60000 ms) naming what is wrong and writing nothing, and a cancel under its key
gives back (releases, no attempt counted) what it leased.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

from tests.contract.support import claim, make_pipeline, new_task, runs_of
from tracker_client.errors import ValidationFailed
from tracker_client.models import Lease
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.requires("parked_claim")]


async def park(tracker: Tracker, wait_ms: int, key: str | None, n: int = 1) -> list[Lease]:
    """A parked claim for role ``coder`` with the suite's defaults."""
    return await tracker.parked_claim("agent-1", "coder", 60_000, n, wait_ms, idempotency_key=key)


async def test_leases_work_created_while_it_waits(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    got: list[Lease] = []

    async def parked() -> None:
        got.extend(await park(tracker, 30_000, str(uuid.uuid4())))

    with anyio.fail_after(15):  # answered by the create, far before its 30 s wait
        async with anyio.create_task_group() as tg:
            tg.start_soon(parked)
            task_id = await tracker.create_task(new_task(pid, "late"))
    assert [x.task.id for x in got] == [task_id]
    assert got[0].run.status == "running"
    assert (await tracker.transition(got[0], "complete")).new_stage == "done"


async def test_takes_what_is_there_at_once_and_answers_empty_after_its_wait(
    tracker: Tracker,
) -> None:
    pid = await make_pipeline(tracker)
    ids = [await tracker.create_task(new_task(pid, f"t{i}")) for i in range(3)]
    batch = await park(tracker, 30_000, str(uuid.uuid4()), n=5)
    assert sorted(x.task.id for x in batch) == sorted(ids)
    started = anyio.current_time()
    assert await park(tracker, 200, str(uuid.uuid4())) == []
    assert anyio.current_time() - started >= 0.2


async def test_a_retry_under_its_key_answers_the_same_leases(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid, "one"))
    key = str(uuid.uuid4())
    [first] = await park(tracker, 0, key)
    [again] = await park(tracker, 0, key)
    assert (again.lease_id, again.run.id) == (first.lease_id, first.run.id)
    assert again.lease_token.get_secret_value() == first.lease_token.get_secret_value()


@pytest.mark.parametrize(
    ("key", "wait_ms", "names"),
    [(None, 10, "idempotency key"), ("k", -1, "wait_ms"), ("k", 60_001, "wait_ms")],
)
async def test_refuses_a_call_without_a_key_or_with_a_bad_wait(
    tracker: Tracker, key: str | None, wait_ms: int, names: str
) -> None:
    pid = await make_pipeline(tracker)
    task_id = await tracker.create_task(new_task(pid, "kept"))
    with pytest.raises(ValidationFailed, match=names):
        await park(tracker, wait_ms, key)
    assert await runs_of(tracker, task_id) == []  # nothing was leased


async def test_a_cancel_gives_back_what_it_leased(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    task_id = await tracker.create_task(new_task(pid, "given back"))
    key = str(uuid.uuid4())
    [lease] = await park(tracker, 0, key)  # its answer "lost": the caller cancels under the key
    assert (await tracker.cancel_parked_claim(idempotency_key=key)).released == 1
    assert [r.status for r in await runs_of(tracker, task_id)] == ["released"]
    assert await park(tracker, 0, key) == []  # the given-back lease is not handed out again
    again = await claim(tracker)
    assert again is not None and again.task.id == task_id and again.lease_id != lease.lease_id
    assert (await tracker.cancel_parked_claim(idempotency_key=str(uuid.uuid4()))).released == 0


async def test_a_cancel_that_overtakes_its_claim_leaves_the_claim_nothing(
    tracker: Tracker,
) -> None:
    """A stopping worker's cancel can reach the server before its parked claim does (two
    connections): the claim that arrives after it leases nothing, even with work waiting,
    and answers at once instead of parking for a caller that is gone."""
    pid = await make_pipeline(tracker)
    key = str(uuid.uuid4())
    assert (await tracker.cancel_parked_claim(idempotency_key=key)).released == 0
    task_id = await tracker.create_task(new_task(pid, "not for the cancelled claim"))
    with anyio.fail_after(10):  # not its 30 s wait
        assert await park(tracker, 30_000, key) == []
    assert await runs_of(tracker, task_id) == []
    again = await claim(tracker)
    assert again is not None and again.task.id == task_id
