"""``rail.transition`` (and the blocking twin): a task waiting at a human step is moved on by
the application, on a real rail file and the same file served on 127.0.0.1; the instructions
reach the next run; a stale expected stage, a stage with a role and a bad trigger are refused
naming what is wrong with nothing written; a plain NullTickets server says it cannot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.producer.conftest import TOKEN, Target, served
from tests.remote.fake_nulltickets import FakeNullTickets
from tracker_client import connect, connect_sync
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import Conflict, InvalidTransition, Unsupported, ValidationFailed
from tracker_client.models import TaskCreate, TaskDetail

pytestmark = pytest.mark.timeout(60)

APPROVAL = {
    "initial": "draft",
    "states": {
        "draft": {"agent_role": "writer"},
        "approval": {"human": True},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "draft", "to": "approval", "trigger": "submit"},
        {"from": "approval", "to": "done", "trigger": "approve"},
        {"from": "approval", "to": "draft", "trigger": "reject"},
    ],
}


def _rail(path: Path) -> str:
    """A rail file with the ``approval`` pipeline and a task a writer moved to its human step."""

    async def seed() -> str:
        tracker = await EmbeddedTracker.open(str(path))
        try:
            pid = await tracker.create_pipeline("essays", APPROVAL)
            tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="essay"))
            lease = await tracker.claim("writer-1", "writer", 60_000)
            assert lease is not None
            await tracker.transition(lease, "submit")
            return tid
        finally:
            await tracker.aclose()

    return anyio.run(seed)


def _read(path: Path, tid: str) -> tuple[TaskDetail, list[Any]]:
    async def read() -> tuple[TaskDetail, list[Any]]:
        tracker = await EmbeddedTracker.open(str(path))
        try:
            events = await tracker.list_task_events(tid, kind="transition")
            return await tracker.get_task(tid), [e.data for e in events.items]
        finally:
            await tracker.aclose()

    return anyio.run(read)


@pytest.fixture(params=["embedded", "served"])
def essay(request: Any, tmp_path: Path) -> Any:
    """(target, task id): the rail as a file and over HTTP, a task at its human step."""
    path = tmp_path / "rail.db"
    tid = _rail(path)
    if request.param == "embedded":
        yield Target(f"sqlite:///{path}", None, path), tid
    else:
        with served(path) as url:
            yield Target(url, TOKEN, path), tid


def test_the_application_moves_a_task_at_a_human_step(essay: tuple[Target, str]) -> None:
    target, tid = essay
    with connect_sync(target.url, token=target.token) as rail:
        result = rail.transition(tid, "reject", instructions="a shorter intro")
        assert (result.previous_stage, result.new_stage) == ("approval", "draft")
    task, moves = _read(target.path, tid)
    assert task.stage == "draft"
    assert moves[-1] == {
        "trigger": "reject",
        "from": "approval",
        "to": "draft",
        "instructions": "a shorter intro",
        "by": "human",
    }


def test_refusals_name_what_is_wrong_and_write_nothing(essay: tuple[Target, str]) -> None:
    target, tid = essay
    before = _read(target.path, tid)
    with connect_sync(target.url, token=target.token) as rail:
        with pytest.raises(Conflict, match="expected 'draft'") as stale:
            rail.transition(tid, "approve", expected_stage="draft")
        assert stale.value.code == "expected_stage_mismatch"
        with pytest.raises(InvalidTransition) as bad:
            rail.transition(tid, "ship")
        assert sorted(bad.value.allowed) == ["approve", "reject"]
        with pytest.raises(ValidationFailed, match="trigger"):
            rail.transition(tid, "")
    assert _read(target.path, tid) == before
    with connect_sync(target.url, token=target.token) as rail:
        rail.transition(tid, "reject")
        with pytest.raises(Conflict, match="agent_role 'writer'") as role:
            rail.transition(tid, "submit")  # back in a stage a worker moves
        assert role.value.code == "not_a_human_step"


@pytest.mark.anyio
async def test_the_async_rail_and_an_idempotent_retry(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    tid = await anyio.to_thread.run_sync(_rail, path)
    async with connect(f"sqlite:///{path}") as rail:
        # A retry is the same request: the stage it expected, not the one read again.
        key = {"expected_stage": "approval", "idempotency_key": "approve-essay-1"}
        first = await rail.transition(tid, "approve", **key)
        again = await rail.transition(tid, "approve", **key)
        assert first == again and first.new_stage == "done"
        assert (await rail.task(tid)).stage == "done"


@pytest.mark.anyio
async def test_a_plain_nulltickets_server_cannot_move_a_task_by_hand() -> None:
    fake = FakeNullTickets()
    async with connect("http://127.0.0.1:7700", transport=fake.transport()) as rail:
        with pytest.raises(Unsupported, match="only under a worker's lease"):
            await rail.transition("any-task", "approve")
    assert [r.url.path for r in fake.requests] == ["/health"]
