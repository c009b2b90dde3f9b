"""``tracker.call(name, ...)``: any operation of the contract table by name, on every tracker.

The same answers as the typed methods (a one-field answer is its value), so an extension
operation needs no typed client method to be usable everywhere.
"""

from __future__ import annotations

import pytest

from tests.contract.support import BACKLOG_OPS, make_pipeline, new_task
from tracker_client.errors import NotFound
from tracker_client.models import Pipeline, TaskDetail
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


async def test_call_answers_as_the_typed_methods(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, "by name"))
    detail = await tracker.call("get_task", tid)
    assert isinstance(detail, TaskDetail)
    assert detail == await tracker.get_task(tid)
    assert [p.id for p in await tracker.call("list_pipelines")] == [
        p.id for p in await tracker.list_pipelines()
    ]
    assert isinstance(await tracker.call("get_pipeline", pid), Pipeline)
    page = await tracker.call("list_tasks", pipeline_id=pid, limit=10)
    assert [t.id for t in page.items] == [tid]


async def test_call_keeps_the_errors_of_the_operation(tracker: Tracker) -> None:
    with pytest.raises(NotFound):
        await tracker.call("get_task", "00000000-0000-4000-8000-00000000dead")


async def test_call_refuses_a_name_the_contract_does_not_have(tracker: Tracker) -> None:
    with pytest.raises(KeyError):
        await tracker.call("drop_everything")


@pytest.mark.requires(BACKLOG_OPS)
async def test_call_an_extension_operation(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
    assert await tracker.call("cancel_all", pipeline_id=pid) == 2
    assert await tracker.claim("agent-1", "coder", 60_000) is None
