"""PostgreSQL's one-trip transition (``bw_transition``) after an apply made by another process:
the worker's instance worked the move out from the version it had cached, so the call checks the
pipeline's version (``bw_version_is``) and, the pipeline having moved on, writes nothing; the
rail's transition then judges the task by its own version. A real PostgreSQL server, two
tracker instances on one schema (a worker's and an operator's)."""

from __future__ import annotations

import logging
import uuid

import pytest

from tests.pipelines.defs import v1, with_edit
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.anyio


async def test_a_stale_cached_version_never_writes_the_old_move(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.postgres.server import fresh_schema_url

    # the one-trip path steps aside while the tracker logs at INFO
    caplog.set_level(logging.WARNING, logger="backlog_worker.tracker")
    url = fresh_schema_url(f"pipevo-one-trip-{uuid.uuid4()}")
    operator = await open_tracker(url, create=True)
    worker = await open_tracker(url)
    try:
        pid = (await operator.apply_pipeline("review", v1())).pipeline_id
        assert pid is not None
        first = await operator.create_task(TaskCreate(pipeline_id=pid, title="first"))
        lease = await worker.claim("w", "writer", 60_000)
        assert lease is not None and lease.task_id == first
        assert (await worker.transition(lease, "submit")).new_stage == "review"  # v1 cached
        await operator.apply_pipeline("review", with_edit())  # another instance: version 2
        second = await operator.create_task(TaskCreate(pipeline_id=pid, title="second"))
        lease = await worker.claim("w", "writer", 60_000)
        assert lease is not None and lease.task_id == second
        # version 1 said review; the task is under version 2, where submit leads to edit
        assert (await worker.transition(lease, "submit")).new_stage == "edit"
        assert (await operator.get_task(second)).stage == "edit"
        third = await operator.create_task(TaskCreate(pipeline_id=pid, title="third"))
        lease = await worker.claim("w", "writer", 60_000)
        assert lease is not None and lease.task_id == third
        assert (await worker.transition(lease, "submit")).new_stage == "edit"  # v2 cached now
    finally:
        await worker.aclose()
        await operator.aclose()
