"""``count_tasks`` (extension ``count``): how many tasks, by stage and/or pipeline, unlisted.

The demonstration of a new extension operation: its row in the contract table, the embedded
tracker's method and this test; the served tracker's route, auth, OpenAPI entry and ``/health``
extension, and the remote client's call, come from the row.
"""

from __future__ import annotations

import pytest

from tests.contract.support import claim, make_pipeline, new_task
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


async def test_count_tasks_by_stage_and_pipeline(tracker: Tracker) -> None:
    first, second = await make_pipeline(tracker), await make_pipeline(tracker)
    await tracker.create_tasks([new_task(first, "a"), new_task(first, "b"), new_task(second)])
    lease = await claim(tracker)
    await tracker.transition(lease, "complete")
    assert await tracker.call("count_tasks") == 3
    assert await tracker.call("count_tasks", pipeline_id=first) == 2
    assert await tracker.call("count_tasks", stage="todo") == 2
    assert await tracker.call("count_tasks", stage="done", pipeline_id=lease.task.pipeline_id) == 1
    assert await tracker.call("count_tasks", stage="no-such-stage") == 0
