"""Four worker processes (as if on four hosts) drain 2,000 tasks of one PostgreSQL rail exactly
once, one of them SIGKILLed in the middle: its in-flight lease lapses, another process finishes
that task, and no task is finished twice or lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from tests.contract.support import make_pipeline, new_task
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tests.startline import reap, release_together
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
WORKERS = 4
TASKS = 2_000
KILL_AFTER = 150


def _spawn(url: str, agent: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.postgres._drain_proc", "drain", url, agent],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(url: str) -> tuple[list[str], list[str]]:
    """Start the four at once, SIGKILL the first after KILL_AFTER tasks; (its lines, the rest)."""
    procs = [_spawn(url, f"host-{n}") for n in range(WORKERS)]
    try:
        release_together(procs)
        victim = procs[0]
        assert victim.stdout is not None
        killed: list[str] = []
        while len(killed) < KILL_AFTER:
            line = victim.stdout.readline()
            assert line, f"the victim ended early: {victim.stderr and victim.stderr.read()}"
            killed.append(line.strip())
        os.kill(victim.pid, signal.SIGKILL)
        out, _ = victim.communicate(timeout=30)
        assert victim.returncode == -signal.SIGKILL
        killed += out.split()
        rest: list[str] = []
        for proc in procs[1:]:
            out, err = proc.communicate(timeout=150)
            assert proc.returncode == 0, err[-2000:]
            rest += out.splitlines()
        return killed, rest
    finally:
        reap(procs)


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

    _killed, rest = await anyio.to_thread.run_sync(_run, url)
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
