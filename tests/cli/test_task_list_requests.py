"""``task list`` over HTTP: one request per page, not one per open task shown.

A real ``tracker serve`` on 127.0.0.1 behind a counting proxy (tests/faultproxy.py) holds 1,005
tasks (two pages of ``task list``'s 1,000), some running, one failed, one blocked. The served
rail lists each task's latest run and whether it is blocked (extension ``list_state``), so the
command reads the pipelines and two pages and nothing per task. Behind the proxy's plain
NullTickets mode (its ``/health`` lists no extension) the client ignores that state and reads
each open task shown whole, as before, and the state column says the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio

from tests.faultproxy import FaultProxy
from tests.worker.daemonkit import clean_env, serve_tracker
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate

#: Tasks on the rail: more than one page of ``task list`` (1,000 a page).
TASKS = 1005


async def _fill(db: Path) -> dict[str, str]:
    """1,005 tasks in ``flow``: two running, one failed (retry later), one blocked, the rest
    waiting; the special ones first by priority. Answers the expected words by title."""
    async with await EmbeddedTracker.open(str(db)) as rail:
        (flow,) = await rail.list_pipelines()
        upstream = await rail.create_task(TaskCreate(pipeline_id=flow.id, title="upstream"))
        special = [TaskCreate(pipeline_id=flow.id, title=t, priority=10) for t in "abc"]
        await rail.create_tasks(special)
        blocked = TaskCreate(
            pipeline_id=flow.id, title="blocked", priority=10, dependencies=[upstream]
        )
        await rail.create_task(blocked)
        rest = [TaskCreate(pipeline_id=flow.id, title=f"t{i}") for i in range(TASKS - 5)]
        await rail.create_tasks(rest)
        leases = [await rail.claim(f"agent-{i}", "coder", 60_000) for i in range(3)]
        assert [lease.task.title for lease in leases if lease is not None] == ["a", "b", "c"]
        assert leases[2] is not None
        await rail.fail(leases[2], "boom")
    return {
        "a": "running (attempt 1, agent-0)",
        "b": "running (attempt 1, agent-1)",
        "c": "failed (attempt 1)",
        "blocked": "waiting, blocked",
        "upstream": "waiting",
    }


def _task_list(url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "worker", "task", "list", "--tracker", url, *args],
        capture_output=True,
        text=True,
        env=clean_env(COLUMNS="200"),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _requests(proxy: FaultProxy) -> tuple[int, int]:
    """(``GET /tasks`` pages, ``GET /tasks/{id}`` reads) the proxy forwarded."""
    pages = sum(1 for line in proxy.seen if line.startswith(("GET /tasks?", "GET /tasks ")))
    reads = sum(1 for line in proxy.seen if line.startswith("GET /tasks/"))
    return pages, reads


def _check_words(table: str, words: dict[str, str]) -> None:
    rows = {line.split()[1]: line for line in table.splitlines() if len(line.split()) > 1}
    for title, said in words.items():
        assert said in rows[title], (title, rows[title])


def test_task_list_over_http_makes_one_request_per_page(tmp_path: Path) -> None:
    with serve_tracker(tmp_path, token=None) as (url, db):
        words = anyio.run(_fill, db)
        proxy = FaultProxy(int(url.rsplit(":", 1)[1]))
        with proxy.start():
            table = _task_list(proxy.url)
            assert _requests(proxy) == (2, 0), proxy.seen
            _check_words(table, words)
            proxy.seen.clear()
            listed = json.loads(_task_list(proxy.url, "--json", "--all"))
            assert _requests(proxy) == (2, 0), proxy.seen
            # every request of the command: /health, the pipelines, the two pages
            assert len(proxy.seen) <= 4, proxy.seen
    states = {t["title"]: t["state"] for t in listed["items"]}
    assert listed["total"] == TASKS
    assert (states["a"], states["b"], states["c"], states["blocked"]) == (
        "running",
        "running",
        "failed",
        "waiting",
    )


def test_a_plain_nulltickets_server_still_gets_the_state_column(tmp_path: Path) -> None:
    with serve_tracker(tmp_path, token=None) as (url, db):
        words = anyio.run(_fill, db)
        proxy = FaultProxy(int(url.rsplit(":", 1)[1]), plain_nulltickets=True)
        with proxy.start():
            table = _task_list(proxy.url, "--limit", "10")
            # a plain server's listing says nothing of runs: each open task shown is read whole
            assert _requests(proxy) == (2, 10), proxy.seen
    _check_words(table, words)
