"""The cold-path promise of a running worker on a PostgreSQL rail (issue 31, memory).

:mod:`tests.test_cold_paths` pins it on the embedded and served rails; this runs the same real
``backlog-worker run`` (drain mode, ``python`` executor, a no-op job) on the shared PostgreSQL
server, in a subprocess that prints its ``sys.modules`` at exit: besides what no worker imports
(:data:`~tests.test_cold_paths.NEVER`, less this rail and its driver), no embedded rail and no
HTTP client.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from tests.postgres.server import PgServer, schema_name
from tests.test_cold_paths import NEVER, NOT_EMBEDDED, PIPELINE, _loaded, _report, _run
from tests.worker.daemonkit import python_config
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.timeout(120)

#: What a worker on a PostgreSQL rail does not import besides: the other rails' stacks (what an
#: embedded worker leaves out, the wire contract's table among them: ~1.8 ms of start-up, read
#: by the tracker only while an extension is missing here; and the embedded rail), and SQLite's
#: driver (issue 31, memory: ~0.9 MiB; the shared rules name ``sqlite3`` in annotations only).
#: Not the URL password mask, which the PostgreSQL rail's options import to name their URL.
NOT_POSTGRES = (
    "tracker_client.embedded",
    "sqlite3",
    "_sqlite3",
    *(name for name in NOT_EMBEDDED if name != "tracker_client.urlmask"),
)


async def _seed(url: str, n: int) -> None:
    tracker = await open_tracker(url)
    try:
        pipeline_id = await tracker.create_pipeline("p", PIPELINE)
        await tracker.create_tasks(
            [TaskCreate(pipeline_id=pipeline_id, title=f"t{i}") for i in range(n)]
        )
    finally:
        await tracker.aclose()


def _completed(server: PgServer, schema: str) -> int:
    import psycopg

    with psycopg.connect(server.url) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {schema}.runs WHERE status = 'completed'"  # our own name
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
def test_a_postgres_worker_leaves_every_cold_path_unimported(
    pg_server: PgServer, tmp_path: Path
) -> None:
    schema = schema_name(f"cold-paths-{uuid.uuid4()}")
    url = f"{pg_server.url}?schema={schema}"
    anyio.run(_seed, url, 3)
    config = python_config(tmp_path, url, "noop_job:run", "drain = true")
    proc = _run(config)
    modules = _report(proc)["modules"]
    assert _completed(pg_server, schema) == 3  # it really claimed, ran and finished every task
    assert {"worker.cli.run", "tracker_client.postgres.tracker"} <= set(modules)
    never = tuple(n for n in NEVER if n not in ("tracker_client.postgres", "psycopg"))
    assert _loaded(modules, never + NOT_POSTGRES) == []
