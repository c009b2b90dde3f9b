"""Threads of cancelled runs are capped per role: a real ``backlog-worker run`` whose plain ``def``
ignores cancellation stops claiming for the role at ``max_abandoned_threads`` (logged, in the
``backlog_worker_abandoned_threads`` gauge) and claims again once the thread returns; ``check``
shows the count and the cap; a bad cap is a clear error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.worker.conftest import add_tasks
from tests.worker.daemonkit import clean_env, make_rail, reap, spawn_worker
from tests.worker.test_metrics import metrics_url, poll, scrape, value
from tracker_client.models import RetryPolicy, TaskCreate
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
ONCE = RetryPolicy(max_attempts=1)


def write_config(tmp_path: Path, cap: object) -> Path:
    """Role ``coder`` runs ``hangs_on_hang`` (2 s, deaf to cancellation) with a 0.3 s timeout."""
    path = tmp_path / "worker.toml"
    path.write_text(
        f"""
[tracker]
url = "sqlite:///{tmp_path}/rail.db"
[worker]
workdir = "{tmp_path}/runs"
concurrency = 1
idle_min_s = 0.05
idle_max_s = 0.2
lease_ttl_s = 3
shutdown_grace_s = 1
[[roles]]
name = "coder"
executor = "python"
timeout_s = 0.3
[roles.options]
callable = "tests.plugins.sample_callables:hangs_on_hang"
max_abandoned_threads = {json.dumps(cap)}
[metrics]
listen = "127.0.0.1:0"
"""
    )
    return path


@pytest.mark.timeout(90)
async def test_a_role_at_its_thread_cap_is_not_claimed_until_a_thread_returns(
    tracker: Tracker, pipeline_id: str, tmp_path: Path
) -> None:
    await tracker.create_tasks([TaskCreate(pipeline_id=pipeline_id, title="hang")])
    log = tmp_path / "worker.log"
    proc = spawn_worker(write_config(tmp_path, 1), log, env=clean_env(PYTHONPATH=str(ROOT)))
    try:
        url = await metrics_url(log, proc)
        async with httpx.AsyncClient(timeout=10) as client:

            async def refused() -> bool:
                text = log.read_text()
                return "role coder: not claiming" in text

            await poll(refused, "the worker refusing the role at its cap")
            found = await scrape(client, url)
            assert value(found, "backlog_worker_abandoned_threads", role="coder") == 1
            text = log.read_text()
            assert "max_abandoned_threads = 1" in text and "ignores ctx.cancelled" in text
            [quick] = await add_tasks(tracker, pipeline_id, 1)
            assert (await tracker.get_task(quick)).stage == "todo"  # not claimed while refused

            async def resumed() -> bool:
                return "role coder: claiming again" in log.read_text()

            await poll(resumed, "the worker claiming again once the thread returned")

            async def quick_done() -> bool:
                return (await tracker.get_task(quick)).stage == "review"

            await poll(quick_done, "the quick task run once the role is claimed again")
            found = await scrape(client, url)
            assert value(found, "backlog_worker_abandoned_threads", role="coder") in (0, 1)
    finally:
        reap(proc)


def test_check_shows_the_cap_and_refuses_a_bad_one(tmp_path: Path) -> None:
    def check(config: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "worker", "check", "--config", str(config)],
            capture_output=True,
            text=True,
            env=clean_env(PYTHONPATH=str(ROOT)),
            cwd=tmp_path,
            timeout=60,
        )

    make_rail(tmp_path)
    done = check(write_config(tmp_path, 3))
    assert "0 abandoned thread(s) of cancelled runs, cap 3" in done.stdout, (
        done.stdout + done.stderr
    )
    done = check(write_config(tmp_path, 0))
    assert done.returncode != 0
    assert "max_abandoned_threads" in done.stdout + done.stderr


@pytest.mark.timeout(90)
async def test_a_draining_worker_waits_for_a_refused_role_without_spinning(
    tracker: Tracker, pipeline_id: str, tmp_path: Path
) -> None:
    """``run --drain``: the refused role still has work, so no drain yet, and no claim loop
    either (the drain's "claim now" would be refused again at once): the normal back-off."""
    await tracker.create_tasks(
        [TaskCreate(pipeline_id=pipeline_id, title="hang", retry_policy=ONCE)]
    )
    [quick] = await add_tasks(tracker, pipeline_id, 1)
    config = write_config(tmp_path, 1)
    config.write_text('log_level = "DEBUG"\n' + config.read_text())
    log = tmp_path / "worker.log"
    proc = spawn_worker(config, log, "--drain", env=clean_env(PYTHONPATH=str(ROOT)))
    try:
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        reap(proc)
    text = log.read_text()
    assert "role coder: not claiming" in text and "role coder: claiming again" in text
    refused = text[
        text.index("role coder: not claiming") : text.index("role coder: claiming again")
    ]
    assert refused.count("not drained") < 10, "the drain spun while the role was refused"
    assert (await tracker.get_task(quick)).stage == "review"
