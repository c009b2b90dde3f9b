"""The one-statement claims answer only the columns a lease is built from, against a real server.

``claim.many_tx`` and ``hot.finish_claim_tx`` (``tracker_client/postgres/sql``) name the
columns of each leased row instead of answering the whole ``tasks`` row: every one of them is
loaded into a Python object on the worker's loop. A ``Task`` field left out of those lists would
read as its default (or make every lease unreadable), so every field is checked here, through
both statements, on a task whose fields are all set: the claimed lease's task is the task as the
rail reads it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import pytest

from tests.contract.support import make_pipeline, new_task, simple_pipeline
from tests.postgres.batch_rail import finish_items
from tests.postgres.server import PgServer, fresh_schema_url
from tracker_client.contract.batch_models import FinishResult
from tracker_client.factory import open_tracker
from tracker_client.models import Lease, RetryPolicy, Task
from tracker_client.postgres.claims import CLAIM_CALL
from tracker_client.postgres.pairing import PAIR_CALL

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quiet_tracker_log"),
]

_META = {"k": [1, "two"]}
#: The fields of a lease's task that a ``tasks`` row holds (``listed`` is a listing's only).
_ROW_FIELDS = set(Task.model_fields) - {"listed"}


def _full_task(pid: str, title: str, parent: str, now_ms: int, metadata: Any) -> Any:
    """A task with every optional field of a row set to something other than its default."""
    return new_task(
        pid,
        title,
        description="all of it",
        priority=7,
        metadata=metadata,
        retry_policy=RetryPolicy(
            max_attempts=4, retry_delay_ms=250, dead_letter_stage="done", backoff="exponential"
        ),
        concurrency_key=f"key-{title}",
        expires_at_ms=now_ms + 3_600_000,
        max_stale_attempts=2,
        run_at_ms=now_ms - 1_000,
        dedupe_key=f"dedupe-{title}",
        parent_id=parent,
    )


def _as_listed(task: Task) -> dict[str, Any]:
    return task.model_dump(include=_ROW_FIELDS)


async def test_both_claim_statements_answer_every_field_of_the_task(
    pg_server: PgServer, sent_queries: list[str]
) -> None:
    tracker: Any = await open_tracker(fresh_schema_url(f"cols-{uuid.uuid4()}", claim_ahead="off"))
    try:
        pid = await make_pipeline(tracker, simple_pipeline())
        now_ms = int(time.time() * 1000)
        parent = (await tracker.create_tasks([new_task(pid, "parent", priority=100)]))[0]
        # t0's metadata is {} (its lease built in one validation), t1's is not (read apart)
        await tracker.create_tasks(
            [
                _full_task(pid, "t0", parent, now_ms, {}),
                _full_task(pid, "t1", parent, now_ms, _META),
            ]
        )
        sent_queries.clear()
        first: list[Lease] = await tracker.claim_many("a", "coder", 60_000, 2, idempotency_key="c1")
        assert CLAIM_CALL in sent_queries
        stored = {x.task.id: await tracker.get_task(x.task.id) for x in first}
        # the parent (priority 100) and t0 leased: their reports, then the claim of t1 beside them
        out: dict[str, Any] = {}

        async def reports() -> None:
            out["finished"] = await tracker.finish_many(finish_items(first, "f"))

        async def claim() -> None:
            await anyio.lowlevel.checkpoint()
            out["claimed"] = await tracker.claim_many("a", "coder", 60_000, 1, idempotency_key="c2")

        sent_queries.clear()
        async with anyio.create_task_group() as tg:
            tg.start_soon(reports)
            tg.start_soon(claim)
        assert sent_queries == [PAIR_CALL]
        # the moves' answers, in the first row only, reached the reports
        assert all(isinstance(o, FinishResult) for o in out["finished"])
        stored.update({x.task.id: await tracker.get_task(x.task.id) for x in out["claimed"]})
        leases = [*first, *out["claimed"]]
        assert sorted(x.task.title for x in leases) == ["parent", "t0", "t1"]
        for lease in leases:
            if lease.task.title == "parent":
                continue
            assert _as_listed(lease.task) == _as_listed(stored[lease.task.id])
            assert lease.task.metadata == ({} if lease.task.title == "t0" else _META)
            assert lease.task.parent_id == parent
            assert lease.task.max_attempts == 4 and lease.task.dead_letter_stage == "done"
            assert lease.run.attempt == 1 and lease.run.task_id == lease.task.id
    finally:
        await tracker.aclose()


def test_row_pick_reads_each_set_of_columns_by_its_own_positions() -> None:
    """``Row.pick`` works out once per set of columns which names a row has and where: rows
    of another column order or set are read by theirs, a name a row lacks is left out."""
    from tracker_client.postgres.dialect import Row, _index

    names = ("id", "stage", "title")
    first = _index((b"seq", b"id", b"title", b"stage"))
    second = _index((b"stage", b"other", b"id"))
    assert Row([1, "a", "t", "s"], first).pick(names) == {"id": "a", "stage": "s", "title": "t"}
    assert Row([2, "b", "u", "r"], first).pick(names) == {"id": "b", "stage": "r", "title": "u"}
    assert Row(["q", 0, "c"], second).pick(names) == {"stage": "q", "id": "c"}
    assert Row(["x"], _index((b"id",))).pick(names) == {"id": "x"}
    assert Row([5], _index((b"seq",))).pick(names) == {}
