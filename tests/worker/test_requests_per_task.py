"""Requests per task: what a real worker sends a real served rail for each no-op task.

A ``tracker serve`` app (an embedded rail behind it) on a real 127.0.0.1 port counts every
request by route; a real ``backlog-worker run --drain`` process (``python`` executor) drains it.
On a rail advertising plain NullTickets (``/health`` with no extensions, as the real server) and
on the served rail with its extensions, a new task costs what a minimal client pays: one claim
and one transition (plus one ``POST /runs/{id}/events`` per flushed report), and the rest of the
worker's requests are a handful per process, not per task. A task at a later stage (it has had
a transition) is read once more on a rail that has the ``task_events`` extension, for the
instructions that transition carried; a new task never is (its version tells it has none).
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from bench.plain import PlainHealth
from tests.remote.fixtures import serve_on_port
from tests.worker.daemonkit import clean_env, python_config
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
TASKS = 30
CONCURRENCY = 4
#: Requests a worker process sends once, not per task: /health, the pipeline, queue figures,
#: its presence (served rail), maintenance, and the idle waits and empty claims at the drain's
#: end (one per slot, a few more while the last runs finish).
PER_PROCESS = 24

ONE_STAGE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
TWO_STAGES = {
    "initial": "todo",
    "states": {
        "todo": {"agent_role": "r"},
        "check": {"agent_role": "r"},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "todo", "to": "check", "trigger": "complete"},
        {"from": "check", "to": "done", "trigger": "complete"},
    ],
}

JOBS = """
from plugins.api import Transition


async def noop(ctx):
    return Transition()


async def one_event(ctx):
    await ctx.report("step", {"n": 1})
    return Transition()
"""

_ID = re.compile(r"/[0-9A-Za-z_-]{16,}")


class Counting:
    """ASGI middleware: counts requests by ``METHOD /route`` (ids as ``{id}``); ``plain``
    answers ``/health`` as a plain NullTickets server does (no extensions, no limits)."""

    def __init__(self, app: Any, *, plain: bool) -> None:
        self.app = app
        self._inner = PlainHealth(app) if plain else app
        self.counts: Counter[str] = Counter()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        self.counts[f"{scope['method']} {_ID.sub('/{id}', path)}"] += 1
        await self._inner(scope, receive, send)

    def per_route(self, prefix: str) -> int:
        """Requests counted whose ``METHOD /route`` starts with ``prefix``."""
        return sum(n for route, n in self.counts.items() if route.startswith(prefix))


@pytest.fixture
async def rail(tmp_path: Path) -> AsyncIterator[EmbeddedTracker]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        yield tracker
    finally:
        await tracker.aclose()


async def _drain(tmp_path: Path, rail: EmbeddedTracker, job: str, *, plain: bool) -> Counting:
    """Serve ``rail`` counting requests; run a real worker with ``jobs:<job>`` to the end."""
    (tmp_path / "jobs.py").write_text(JOBS)
    counting = Counting(create_app(rail), plain=plain)
    async with serve_on_port(counting) as url:
        worker = ("drain = true", "lease_ttl_s = 60")
        config = python_config(
            tmp_path, url, f"jobs:{job}", *worker, concurrency=CONCURRENCY, idle_max_s=0.5
        )
        env = clean_env(PYTHONPATH=f"{tmp_path}:{ROOT}")
        done = await anyio.run_process(
            [sys.executable, "-m", "worker", "run", "--config", str(config)],
            env=env,
            cwd=tmp_path,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return counting


async def _seed(rail: EmbeddedTracker, definition: dict[str, Any]) -> str:
    pipeline_id = await rail.create_pipeline("p", definition)
    await rail.create_tasks(
        [TaskCreate(pipeline_id=pipeline_id, title=f"t{i}") for i in range(TASKS)]
    )
    return pipeline_id


def _completed(tmp_path: Path) -> int:
    with closing(sqlite3.connect(tmp_path / "rail.db")) as conn:
        (n,) = conn.execute("SELECT count(*) FROM runs WHERE status = 'completed'").fetchone()
    return int(n)


def _check(counts: Counting, *, plain: bool, events_per_task: int) -> None:
    """Per task: one claim, ``events_per_task`` event writes and one transition on a plain
    rail; on the served rail at most as many requests (claims may be batched in
    ``claim-many``, the final reports of runs ending together in one ``finish-many``); the rest
    is the
    process's own, at most :data:`PER_PROCESS`."""
    claims = counts.per_route("POST /leases/claim")  # and /leases/claim-many
    events = counts.per_route("POST /runs/{id}/events")
    ends = counts.per_route("POST /runs/{id}/transition") + counts.per_route(
        "POST /runs/{id}/finish"
    )
    assert counts.per_route("GET /tasks/") == 0, counts.counts  # no instructions/upstream read
    assert counts.per_route("POST /runs/{id}/heartbeat") == 0  # short runs under a long lease
    if plain:
        assert counts.per_route("POST /runs/{id}/transition") == TASKS, counts.counts
        assert events == events_per_task * TASKS, counts.counts
        assert TASKS <= claims <= TASKS + PER_PROCESS, counts.counts
    else:  # the final reports go batched (finish-many): at most one request per task
        assert ends == 0, counts.counts
        assert 1 <= counts.per_route("POST /runs/finish-many") <= TASKS, counts.counts
        assert events <= events_per_task * TASKS, counts.counts
    total = sum(counts.counts.values())
    assert total <= (2 + events_per_task) * TASKS + PER_PROCESS, counts.counts


@pytest.mark.parametrize("plain", [True, False], ids=["plain-nulltickets", "served"])
async def test_a_no_op_task_costs_one_claim_and_one_transition(
    tmp_path: Path, rail: EmbeddedTracker, plain: bool
) -> None:
    await _seed(rail, ONE_STAGE)
    counts = await _drain(tmp_path, rail, "noop", plain=plain)
    assert _completed(tmp_path) == TASKS
    _check(counts, plain=plain, events_per_task=0)


@pytest.mark.parametrize("plain", [True, False], ids=["plain-nulltickets", "served"])
async def test_a_task_with_one_report_adds_one_event_write(
    tmp_path: Path, rail: EmbeddedTracker, plain: bool
) -> None:
    await _seed(rail, ONE_STAGE)
    counts = await _drain(tmp_path, rail, "one_event", plain=plain)
    assert _completed(tmp_path) == TASKS
    _check(counts, plain=plain, events_per_task=1)


async def test_a_later_stage_reads_its_instructions_once_and_a_new_task_never(
    tmp_path: Path, rail: EmbeddedTracker
) -> None:
    await _seed(rail, TWO_STAGES)
    counts = await _drain(tmp_path, rail, "noop", plain=False)
    assert _completed(tmp_path) == 2 * TASKS
    # one instructions read per task, at its second stage only (the first has version 1)
    assert counts.per_route("GET /tasks/{id}/events") == TASKS, counts.counts
