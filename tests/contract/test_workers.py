"""Live workers (extension ``workers``) on every tracker of the suite that lists it.

A registration is an upsert stamped with the rail's clock; the state is derived at read time
(``alive``, ``lost`` once silent past ``lost_after_ms``, ``stopped`` after a goodbye); what a
worker runs is the running runs of its agent id (``run_ids`` tell workers sharing one apart).
Bad input is refused naming the field, with nothing written. A tracker that does not list the
extension (a plain NullTickets server) skips these tests, naming it.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.contract.support import CLOCK, FakeClock, claim, make_pipeline, new_task
from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.observe_models import WorkerInfo
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.requires("workers")]

DAY_MS = 86_400_000


@pytest.fixture
async def rail(tracker: Tracker) -> Tracker:
    """The tracker (one listing ``workers``: the module requires it)."""
    return tracker


def _body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "host": "box",
        "pid": 4242,
        "version": "0.1.0",
        "roles": ["coder"],
        "slots": 2,
        "agent_id": "box-4242",
        "started_at_ms": 1_000,
        "lost_after_ms": 60_000,
    }
    body.update(over)
    return body


async def _register(tracker: Tracker, worker_id: str = "w1", **over: Any) -> WorkerInfo:
    info: WorkerInfo = await tracker.call("register_worker", worker_id, **_body(**over))
    return info


async def _list(tracker: Tracker, **query: Any) -> list[WorkerInfo]:
    workers: list[WorkerInfo] = await tracker.call("list_workers", **query)
    return workers


async def test_the_typed_method_is_the_call(rail: Tracker) -> None:
    """``Tracker.register_worker`` (what a worker's presence calls) registers as ``call``
    does, and refreshes the same entry."""
    typed = await rail.register_worker("w-typed", **_body(slots=5))
    assert isinstance(typed, WorkerInfo) and (typed.id, typed.slots) == ("w-typed", 5)
    again = await _register(rail, "w-typed", slots=6)
    assert (again.id, again.slots) == ("w-typed", 6)
    assert [(w.id, w.slots) for w in await _list(rail)] == [("w-typed", 6)]


@pytest.mark.requires(CLOCK)
async def test_register_refresh_lost_and_stopped(rail: Tracker, clock: FakeClock) -> None:
    first = await _register(rail)
    assert (first.id, first.host, first.pid, first.roles, first.slots) == (
        "w1",
        "box",
        4242,
        ["coder"],
        2,
    )
    assert (first.state, first.last_seen_at_ms, first.running) == ("alive", clock.now_ms, [])
    clock.advance(60_000)  # exactly lost_after: still alive
    assert [w.state for w in await _list(rail)] == ["alive"]
    clock.advance(1)
    (lost,) = await _list(rail)
    assert (lost.state, lost.last_seen_at_ms) == ("lost", first.last_seen_at_ms)
    refreshed = await _register(rail, slots=3)  # the same call refreshes it
    assert (refreshed.state, refreshed.slots, refreshed.last_seen_at_ms) == (
        "alive",
        3,
        clock.now_ms,
    )
    stopped = await _register(rail, stopping=True)
    assert stopped.state == "stopped"
    clock.advance(DAY_MS)  # a goodbye is not lost however long ago
    assert [w.state for w in await _list(rail)] == ["stopped"]
    assert [w.id for w in await _list(rail, state="stopped")] == ["w1"]
    assert await _list(rail, state="alive") == []


@pytest.mark.requires(CLOCK)
async def test_listing_order_and_state_filter(rail: Tracker, clock: FakeClock) -> None:
    await _register(rail, "old", started_at_ms=1, agent_id="a1")
    await _register(rail, "gone", started_at_ms=2, agent_id="a2", lost_after_ms=1_000)
    await _register(rail, "bye", started_at_ms=3, agent_id="a3", stopping=True)
    clock.advance(5_000)
    await _register(rail, "new", started_at_ms=4, agent_id="a4")
    assert [(w.id, w.state) for w in await _list(rail)] == [
        ("old", "alive"),
        ("new", "alive"),
        ("gone", "lost"),
        ("bye", "stopped"),
    ]
    assert [w.id for w in await _list(rail, state="lost")] == ["gone"]


@pytest.mark.requires(CLOCK)
async def test_running_is_the_live_runs_of_the_agent(rail: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(rail)
    await rail.create_tasks([new_task(pid, f"t{n}") for n in range(3)])
    await _register(rail, agent_id="me")
    await _register(rail, "other", agent_id="someone-else")
    mine = await claim(rail, agent="me", ttl_ms=10_000)
    (shown,) = (await _register(rail, agent_id="me")).running
    assert (shown.task_id, shown.run_id, shown.role) == (mine.task.id, mine.run_id, "coder")
    theirs = await claim(rail, agent="someone-else", ttl_ms=60_000)
    by_id = {w.id: w for w in await _list(rail)}
    assert [r.task_id for r in by_id["w1"].running] == [mine.task.id]
    assert [r.task_id for r in by_id["other"].running] == [theirs.task.id]
    await rail.transition(theirs, "complete")  # a finished run is no longer run
    clock.advance(10_001)  # nor is one whose lease lapsed (a killed worker's)
    assert all(w.running == [] for w in await _list(rail))
    await claim(rail, agent="me")
    stopped = await _register(rail, agent_id="me", stopping=True)
    assert stopped.running == []  # a stopped worker runs nothing


async def test_workers_sharing_an_agent_id_each_show_their_own_runs(rail: Tracker) -> None:
    pid = await make_pipeline(rail)
    await rail.create_tasks([new_task(pid, f"t{n}") for n in range(3)])
    await _register(rail, "p1", agent_id="fleet", started_at_ms=1)
    await _register(rail, "p2", agent_id="fleet", started_at_ms=2)
    one = await claim(rail, agent="fleet")
    two = await claim(rail, agent="fleet")
    await _register(rail, "p1", agent_id="fleet", started_at_ms=1, run_ids=[one.run_id])
    await _register(rail, "p2", agent_id="fleet", started_at_ms=2, run_ids=[two.run_id])
    fresh = await claim(rail, agent="fleet")  # reported by no one yet: the newest alive one
    by_id = {w.id: sorted(r.run_id for r in w.running) for w in await _list(rail)}
    assert by_id == {"p1": [one.run_id], "p2": sorted([two.run_id, fresh.run_id])}


async def test_forget_worker(rail: Tracker) -> None:
    await _register(rail, "w1")
    await _register(rail, "w2", agent_id="x")
    forgotten: WorkerInfo = await rail.call("forget_worker", "w1")
    assert forgotten.id == "w1"
    assert [w.id for w in await _list(rail)] == ["w2"]
    with pytest.raises(NotFound, match="w1"):
        await rail.call("forget_worker", "w1")


@pytest.mark.requires(CLOCK)
async def test_workers_silent_seven_days_are_forgotten(rail: Tracker, clock: FakeClock) -> None:
    await _register(rail, "old", stopping=True)
    await _register(rail, "lost", agent_id="l")
    clock.advance(7 * DAY_MS + 1)
    assert await _list(rail) == []
    await _register(rail, "new", agent_id="n")
    assert [w.id for w in await _list(rail)] == ["new"]
    with pytest.raises(NotFound):  # deleted, not only hidden
        await rail.call("forget_worker", "old")


@pytest.mark.parametrize(
    ("worker_id", "over", "field"),
    [
        ("w1", {"pid": 0}, "pid"),
        ("w1", {"slots": 0}, "slots"),
        ("w1", {"slots": 10_001}, "slots"),
        ("w1", {"roles": []}, "roles"),
        ("w1", {"roles": [""]}, "roles"),
        ("w1", {"host": ""}, "host"),
        ("w1", {"host": "x" * 256}, "host"),
        ("w1", {"agent_id": " "}, "agent_id"),
        ("w1", {"lost_after_ms": 10}, "lost_after_ms"),
        ("w1", {"started_at_ms": -1}, "started_at_ms"),
        ("w1", {"colour": "red"}, "colour"),
        ("w\x01", {}, "worker_id"),
    ],
)
async def test_bad_registration_names_the_field_and_writes_nothing(
    rail: Tracker, worker_id: str, over: dict[str, Any], field: str
) -> None:
    # The remote client checks the body's shape (an unknown key) before sending it.
    with pytest.raises((ValidationFailed, ValidationError), match=field):
        await _register(rail, worker_id, **over)
    assert await _list(rail) == []


async def test_unknown_state_filter_is_refused(rail: Tracker) -> None:
    await _register(rail)
    with pytest.raises(ValidationFailed, match="state"):
        await _list(rail, state="zombie")
