"""Four worker processes (as if on four hosts) drain 2,000 tasks of one PostgreSQL rail exactly
once, one of them SIGKILLed in the middle: its in-flight lease lapses, another process finishes
that task, and no task is finished twice or lost."""

from __future__ import annotations

import uuid

import anyio
import pytest

from tests.contract.support import make_pipeline, new_task
from tests.postgres.drain_hosts import drain_losing_one
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKERS = 4
TASKS = 2_000
KILL_AFTER = 150


@pytest.mark.timeout(240)
async def test_four_hosts_drain_every_task_exactly_once_despite_a_sigkill(
    pg_server: PgServer,
) -> None:
    key = f"hosts-{uuid.uuid4()}"
    url = fresh_schema_url(key, pool_size=2)
    tracker = await open_tracker(url)
    try:
        pid = await make_pipeline(tracker)
        for start in range(0, TASKS, 500):
            await tracker.create_tasks([new_task(pid, f"t{i}") for i in range(start, start + 500)])
    finally:
        await tracker.aclose()

    _killed, rest = await anyio.to_thread.run_sync(
        drain_losing_one, "drain", url, WORKERS, KILL_AFTER
    )
    assert any(line.startswith("drained ") for line in rest)

    import psycopg

    schema = schema_name(key)
    with psycopg.connect(pg_server.url) as conn:
        stages = conn.execute(f"SELECT stage, count(*) FROM {schema}.tasks GROUP BY stage")
        assert dict(stages.fetchall()) == {"done": TASKS}
        completed = conn.execute(
            f"SELECT task_id, count(*) FROM {schema}.runs WHERE status = 'completed' "
            "GROUP BY task_id HAVING count(*) <> 1"
        ).fetchall()
        assert completed == [], "a task finished twice"
        total = conn.execute(
            f"SELECT count(DISTINCT task_id) FROM {schema}.runs WHERE status = 'completed'"
        ).fetchone()
        assert total == (TASKS,)
        statuses: dict[str, int] = dict(
            conn.execute(f"SELECT status, count(*) FROM {schema}.runs GROUP BY status").fetchall()
        )
        assert set(statuses) <= {"completed", "stale"}
        assert statuses.get("stale", 0) <= 1  # at most the victim's in-flight lease
        agents = conn.execute(
            f"SELECT count(DISTINCT agent_id) FROM {schema}.runs WHERE status = 'completed'"
        ).fetchone()
        assert agents == (WORKERS,)  # every host took part
