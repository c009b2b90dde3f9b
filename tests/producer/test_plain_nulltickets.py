"""The producer on a plain NullTickets server (the FakeNullTickets imitation, no extensions):
what NullTickets has works (by pipeline id, metadata, priority, dependencies, wait by polling);
every option it would silently ignore raises ``Unsupported`` naming it, with nothing sent."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.remote.fake_nulltickets import FakeNullTickets
from tracker_client import connect
from tracker_client.errors import NotFound, Unsupported
from tracker_client.producer.rail import Rail

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

URL = "http://127.0.0.1:7700"
DEFINITION = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


async def _pipeline(rail: Rail) -> str:
    return await rail.tracker.create_pipeline("plain", DEFINITION)


def _task_writes(fake: FakeNullTickets) -> int:
    return sum(1 for r in fake.requests if r.method == "POST" and r.url.path.startswith("/tasks"))


async def test_what_nulltickets_has_works() -> None:
    fake = FakeNullTickets()
    async with connect(URL, transport=fake.transport(), poll_interval_s=0.05) as rail:
        assert not (await rail.capabilities()).task_extensions
        pid = await _pipeline(rail)
        first = await rail.submit(pid, "a", metadata={"k": 1}, priority=3)
        second = await rail.submit(pid, "b", depends_on=[first], idempotency_key="key-1")
        ids = await rail.submit_many([{"pipeline": pid, "title": "c"}])
        assert (await rail.task(second)).title == "b"
        # sent with the create itself (POST /tasks takes ``dependencies``)
        bodies = [json.loads(r.content) for r in fake.requests if r.url.path == "/tasks"]
        assert bodies[1]["dependencies"] == [first]
        assert "dependencies" not in bodies[0]
        assert (await rail.task(first)).metadata == {"k": 1}
        assert len(ids) == 1
        waited = await rail.wait(first, timeout=0.2)  # polled: NullTickets has no wait
        assert (waited.finished, waited.outcome) == (False, "pending")
        with pytest.raises(NotFound, match="cannot list pipelines by name, pass the pipeline's id"):
            await rail.submit("plain", "by name")


UNSUPPORTED: list[tuple[str, Any]] = [
    ("delay", 600),
    ("delay", timedelta(minutes=5)),
    ("run_at", datetime.now(UTC) + timedelta(hours=1)),
    ("dedupe_key", "nightly"),
    ("concurrency_key", "repo-web"),
]


@pytest.mark.parametrize(("option", "value"), UNSUPPORTED, ids=[o for o, _ in UNSUPPORTED])
async def test_each_unsupported_option_is_named_and_nothing_is_sent(
    option: str, value: Any
) -> None:
    fake = FakeNullTickets()
    async with connect(URL, transport=fake.transport()) as rail:
        pid = await _pipeline(rail)
        with pytest.raises(Unsupported, match=rf"{option}: not supported by a plain NullTickets"):
            await rail.submit(pid, "x", **{option: value})
        with pytest.raises(Unsupported, match=rf"item 0: {option}"):
            await rail.submit_many([{"pipeline": pid, "title": "x", option: value}])
    assert _task_writes(fake) == 0
    assert fake.tasks == {}


async def test_backlog_operations_are_unsupported_and_send_nothing() -> None:
    fake = FakeNullTickets()
    async with connect(URL, transport=fake.transport()) as rail:
        pid = await _pipeline(rail)
        tid = await rail.submit(pid, "x")
        before = len(fake.requests)
        with pytest.raises(Unsupported):
            await rail.cancel(tid)
        with pytest.raises(Unsupported):
            await rail.requeue(tid)
        with pytest.raises(Unsupported, match="requeue_all"):
            await rail.requeue_dead_letters(pid, dry_run=True)
        sent = [r for r in fake.requests[before:] if r.method == "POST"]
        assert sent == []
