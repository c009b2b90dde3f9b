"""The agent operations of :mod:`tracker_client.agents` on a rail that advertises no extension
(a plain NullTickets server, as the remote client sees it): a served tracker whose ``/health``
lists none, so the client uses only plain NullTickets operations, and the rail behind it shows
what they wrote.

Subtasks go in ``metadata.parent_id``, ``wait_for`` is ``add_dependency`` then the transition
(not atomic), checkpoints live in the KV store, the upstream is composed from plain reads, and
a human step is ``Unsupported`` saying why; the extension-only calls of the remote client are
refused before anything is sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.contract.support import claim, make_pipeline, new_task, simple_pipeline
from tests.remote.fixtures import TEST_RETRY
from tracker_client import agents
from tracker_client.agent_models import CHECKPOINT_NAMESPACE, MAX_CHECKPOINT_BYTES
from tracker_client.capabilities import NULLTICKETS
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import Unsupported, ValidationFailed
from tracker_client.models import ArtifactCreate, RetryPolicy
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

AGAIN = RetryPolicy(max_attempts=5, retry_delay_ms=0)

PLANNER = {
    "initial": "plan",
    "states": {
        "plan": {"agent_role": "planner"},
        "summarise": {"agent_role": "planner"},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "plan", "to": "summarise", "trigger": "split"},
        {"from": "summarise", "to": "done", "trigger": "done"},
    ],
}


class PlainHealth(httpx.AsyncBaseTransport):
    """The served tracker with ``GET /health`` answered as a plain NullTickets server does (no
    ``extensions``, no ``limits``); every request is recorded by path."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(f"{request.method} {request.url.path}")
        response = await self.inner.handle_async_request(request)
        if request.url.path != "/health":
            return response
        doc = json.loads(await response.aread())
        doc.pop("extensions", None)
        doc.pop("limits", None)
        return httpx.Response(200, json=doc)


@pytest.fixture
async def rail(tmp_path: Path) -> AsyncIterator[tuple[RemoteTracker, EmbeddedTracker, PlainHealth]]:
    embedded = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    transport = PlainHealth(httpx.ASGITransport(app=create_app(embedded)))
    remote = RemoteTracker("http://127.0.0.1:7700", retry=TEST_RETRY, transport=transport)
    try:
        assert await remote.capabilities() == NULLTICKETS
        yield remote, embedded, transport
    finally:
        await remote.aclose()
        await embedded.aclose()


async def test_spawn_puts_the_parent_in_the_metadata(
    rail: tuple[RemoteTracker, EmbeddedTracker, PlainHealth],
) -> None:
    remote, embedded, _ = rail
    pid = await make_pipeline(remote)
    parent = await remote.create_task(new_task(pid, "parent"))
    with pytest.raises(Unsupported, match="parent_id"):
        await remote.create_task(new_task(pid, "direct", parent_id=parent))
    child = await agents.spawn(remote, new_task(pid, "child", metadata={"k": 1}), parent_id=parent)
    stored = await embedded.get_task(child)
    assert stored.parent_id is None and stored.metadata == {"k": 1, "parent_id": parent}
    assert agents.parent_of(await remote.get_task(child)) == parent
    assert await agents.pipeline_id_of(remote, (await remote.get_pipeline(pid)).name) == pid
    with pytest.raises(Exception, match="'nope' not found"):
        await agents.pipeline_id_of(remote, "nope")


async def test_wait_for_is_add_dependency_then_the_transition(
    rail: tuple[RemoteTracker, EmbeddedTracker, PlainHealth],
) -> None:
    remote, embedded, transport = rail
    plans = await make_pipeline(remote, PLANNER)
    works = await make_pipeline(remote, simple_pipeline("worker"))
    parent = await remote.create_task(new_task(plans, "plan"))
    kids = await remote.create_tasks([new_task(works, "a"), new_task(works, "b")])
    lease = await claim(remote, "planner")
    sent = len(transport.paths)
    with pytest.raises(Unsupported, match="wait_for"):
        await remote.transition(lease, "split", wait_for=kids)
    assert len(transport.paths) == sent  # refused before anything was sent
    await remote.add_dependency(parent, kids[0])  # one edge from before: skipped, not an error
    result = await agents.transition_waiting(remote, lease, "split", [*kids, kids[1]])
    assert result.new_stage == "summarise"
    assert [d.depends_on_task_id for d in await embedded.list_dependencies(parent)] == kids
    assert await remote.claim("p", "planner", 60_000) is None


async def test_checkpoints_live_in_the_kv_store(
    rail: tuple[RemoteTracker, EmbeddedTracker, PlainHealth],
) -> None:
    remote, embedded, _ = rail
    pid = await make_pipeline(remote)
    tid = await remote.create_task(new_task(pid, retry_policy=AGAIN))
    first = await claim(remote)
    assert await agents.previous_checkpoint(remote, first) is None
    with pytest.raises(Unsupported, match="checkpoint"):
        await remote.heartbeat(first, checkpoint={"step": 0})
    await agents.save_checkpoint(remote, first, {"step": 1})
    assert await agents.save_checkpoint(remote, first, {"step": 2}, heartbeat=True) is not None
    assert await agents.previous_checkpoint(remote, first) is None  # its own run's: not previous
    with pytest.raises(ValidationFailed, match=str(MAX_CHECKPOINT_BYTES)):
        await agents.save_checkpoint(remote, first, "x" * MAX_CHECKPOINT_BYTES)
    entry = await embedded.store_get(CHECKPOINT_NAMESPACE, tid)
    assert entry.value == {"run_id": first.run_id, "data": {"step": 2}}
    await remote.fail(first, "crashed")
    second = await claim(remote)
    assert second.previous_checkpoint is None  # the plain claim answer has none...
    assert await agents.previous_checkpoint(remote, second) == {"step": 2}  # ...the store has


async def test_upstream_is_composed_from_plain_reads(
    rail: tuple[RemoteTracker, EmbeddedTracker, PlainHealth],
) -> None:
    remote, embedded, _ = rail
    pid = await make_pipeline(remote)
    works = await make_pipeline(remote, simple_pipeline("worker"))
    once = RetryPolicy(max_attempts=1)
    done, dead, pending = await remote.create_tasks(
        [
            new_task(works, "done"),
            new_task(works, "dead", retry_policy=once),
            new_task(works, "pending"),
        ]
    )
    waiter = await remote.create_task(new_task(pid, "waiter", dependencies=[done, dead, pending]))
    lease = await claim(remote, "worker")
    await remote.add_event(lease, "result", {"n": 7})
    await remote.add_artifact(ArtifactCreate(kind="log", uri="file:///x", task_id=done))
    await remote.transition(lease, "complete")
    await remote.fail(await claim(remote, "worker"), "broken")

    composed = await agents.upstream_of(remote, waiter)
    assert composed == await embedded.list_upstream(waiter)  # the extension's own answer
    assert [(u.task_id, u.outcome) for u in composed] == [
        (done, "done"),
        (dead, "dead_lettered"),
        (pending, "pending"),
    ]
    assert composed[0].result == {"n": 7} and [a.uri for a in composed[0].artifacts] == [
        "file:///x"
    ]


async def test_a_human_step_is_unsupported_saying_why(
    rail: tuple[RemoteTracker, EmbeddedTracker, PlainHealth],
) -> None:
    remote, _, transport = rail
    sent = len(transport.paths)
    with pytest.raises(Unsupported, match="only under a worker's lease"):
        await agents.transition_task(remote, "any-task", "approve")
    with pytest.raises(Unsupported, match="transition_task"):
        await remote.transition_task("any-task", "approve", expected_stage="s")
    assert len(transport.paths) == sent
