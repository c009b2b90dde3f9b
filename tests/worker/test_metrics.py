"""The worker's Prometheus metrics, end to end: a real ``backlog-worker run`` process with
``[metrics] listen`` on a free port, draining tasks of a real embedded rail file, scraped over
HTTP with httpx and checked by exact values; and the start-up errors of a bad listen value or
a port already in use (exit 2, nothing claimed)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.worker.conftest import add_tasks
from tests.worker.daemonkit import clean_env, reap, spawn_worker
from tracker_client.models import QueueStats
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition text by (name, labels)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: Samples, name: str, **labels: str) -> float | None:
    """One sample's value (None: no such series)."""
    return found.get((name, frozenset(labels.items())))


async def poll(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """``await check()`` until it answers something truthy (a real condition, a deadline)."""
    with anyio.fail_after(timeout):
        while True:
            got = await check()
            if got:
                return got
            await anyio.sleep(0.05)
    raise AssertionError(what)  # pragma: no cover - fail_after raised


def write_worker_config(
    tmp_path: Path, argv: list[str], *, listen: str = "127.0.0.1:0", concurrency: int = 1
) -> Path:
    """A worker config for role ``coder`` of the rail ``tmp_path/rail.db``, with metrics."""
    path = tmp_path / "worker.toml"
    path.write_text(
        f"""
[tracker]
url = "sqlite:///{tmp_path}/rail.db"
[worker]
concurrency = {concurrency}
idle_min_s = 0.05
idle_max_s = 0.2
lease_ttl_s = 3
shutdown_grace_s = 2
[[roles]]
name = "coder"
executor = "command"
[roles.options]
argv = {json.dumps(argv)}
[metrics]
listen = {json.dumps(listen)}
queue_interval_s = 0.1
"""
    )
    return path


async def metrics_url(log: Path, proc: subprocess.Popen[bytes]) -> str:
    """The ``/metrics`` URL the worker announces once it listens."""

    async def announced() -> str | None:
        found = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", log.read_text())
        if found is None and proc.poll() is not None:
            raise AssertionError(f"worker exited early: {log.read_text()}")
        return found.group(1) if found else None

    url: str = await poll(announced, "the worker announcing its metrics address")
    return url


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c


async def scrape(client: httpx.AsyncClient, url: str) -> Samples:
    """GET ``url``: its samples (the answer must be the text format)."""
    answer = await client.get(url)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(answer.text)


@pytest.mark.timeout(90)
async def test_a_drain_is_counted_exactly(
    tracker: Tracker, pipeline_id: str, tmp_path: Path, client: httpx.AsyncClient
) -> None:
    ids = await add_tasks(tracker, pipeline_id, 5)
    log = tmp_path / "worker.log"
    proc = spawn_worker(write_worker_config(tmp_path, ["true"]), log)
    try:
        url = await metrics_url(log, proc)

        async def all_finished() -> Samples | None:
            found = await scrape(client, url)
            done = value(
                found, "backlog_worker_runs_finished_total", role="coder", outcome="transitioned"
            )
            # the queue figures lag by up to queue_interval_s: wait for a read after the last run
            queue_empty = value(found, "backlog_worker_queue_waiting", role="coder") == 0 and (
                value(found, "backlog_worker_queue_running", role="coder") == 0
            )
            return found if done == 5 and queue_empty else None

        found: Samples = await poll(all_finished, "5 runs finished")
        text = (await client.get(url)).text
    finally:
        proc.terminate()
        proc.wait(30)
        reap(proc)
    assert value(found, "backlog_worker_claims_total", role="coder", result="task") == 5
    empty = value(found, "backlog_worker_claims_total", role="coder", result="empty") or 0
    claims = value(found, "backlog_worker_tracker_request_duration_seconds_count", action="claim")
    assert claims == 5 + empty  # every attempt timed, none failed
    assert value(found, "backlog_worker_run_duration_seconds_count", role="coder") == 5
    for phase in ("executor", "report"):
        count = "backlog_worker_run_phase_duration_seconds_count"
        assert value(found, count, role="coder", phase=phase) == 5
    latency = "backlog_worker_tracker_request_duration_seconds_count"
    assert value(found, latency, action="transition") == 5
    assert value(found, "backlog_worker_slots") == 1
    assert value(found, "backlog_worker_slots_busy") == 0
    assert value(found, "backlog_worker_queue_running", role="coder") == 0
    assert value(found, "backlog_worker_queue_dead_lettered", role="coder") == 0
    assert value(found, "backlog_worker_queue_oldest_waiting_age_seconds", role="coder") == 0
    assert not [k for k in found if k[0] == "backlog_worker_tracker_errors_total"]
    assert not [k for k in found if k[0] == "backlog_worker_lease_losses_total"]
    info = [dict(k[1]) for k in found if k[0] == "backlog_worker_build_info"]
    assert len(info) == 1 and info[0]["version"] and info[0]["python"]
    assert value(found, "backlog_worker_build_info", **info[0]) == 1
    # nothing names a task, a run or the rail's file
    assert not any(task_id in text for task_id in ids)
    assert str(tmp_path) not in text
    assert proc.returncode == 0


@pytest.mark.timeout(90)
async def test_lease_expiries_its_claims_sweep_are_counted(
    tracker: Tracker, pipeline_id: str, tmp_path: Path, client: httpx.AsyncClient
) -> None:
    """A dead worker's leases on a rail opened directly, reclaimed by this worker's claims
    (no maintenance pass needed): counted in the worker's own metrics."""
    await add_tasks(tracker, pipeline_id, 2)
    for _ in range(2):  # the worker that died: short leases, never heartbeaten
        assert await tracker.claim("dead", "coder", 200) is not None
    log = tmp_path / "worker.log"
    proc = spawn_worker(write_worker_config(tmp_path, ["true"]), log)
    try:
        url = await metrics_url(log, proc)

        async def both_rerun() -> Samples | None:
            found = await scrape(client, url)
            done = value(
                found, "backlog_worker_runs_finished_total", role="coder", outcome="transitioned"
            )
            return found if done == 2 else None

        found: Samples = await poll(both_rerun, "the two lapsed tasks run again")
    finally:
        proc.terminate()
        proc.wait(30)
        reap(proc)
    assert value(found, "backlog_worker_lease_expiries_total") == 2
    assert value(found, "backlog_worker_crash_looped_total") == 0


@pytest.mark.timeout(90)
async def test_slots_and_queue_while_runs_are_in_flight(
    tracker: Tracker, pipeline_id: str, tmp_path: Path, client: httpx.AsyncClient
) -> None:
    await add_tasks(tracker, pipeline_id, 3)
    log = tmp_path / "worker.log"
    config = write_worker_config(tmp_path, ["sleep", "60"], concurrency=2)
    proc = spawn_worker(config, log)
    try:
        url = await metrics_url(log, proc)

        async def two_running() -> Samples | None:
            found = await scrape(client, url)
            busy = value(found, "backlog_worker_slots_busy") == 2
            running = value(found, "backlog_worker_queue_running", role="coder") == 2
            return found if busy and running else None

        found: Samples = await poll(two_running, "two runs in flight")
    finally:
        proc.terminate()
        proc.wait(30)
        reap(proc)
    assert value(found, "backlog_worker_slots") == 2
    assert value(found, "backlog_worker_queue_waiting", role="coder") == 1
    assert value(found, "backlog_worker_claims_total", role="coder", result="task") == 2
    assert value(found, "backlog_worker_queue_oldest_waiting_age_seconds", role="coder") > 0
    assert not [k for k in found if k[0] == "backlog_worker_runs_finished_total"]


@pytest.mark.timeout(90)
async def test_a_cancelled_task_is_a_lease_loss(
    tracker: Tracker, pipeline_id: str, tmp_path: Path, client: httpx.AsyncClient
) -> None:
    [task_id] = await add_tasks(tracker, pipeline_id, 1)
    log = tmp_path / "worker.log"
    proc = spawn_worker(write_worker_config(tmp_path, ["sleep", "60"]), log)
    try:
        url = await metrics_url(log, proc)

        async def busy() -> bool:
            return value(await scrape(client, url), "backlog_worker_slots_busy") == 1

        await poll(busy, "the run in flight")
        await tracker.cancel(task_id)

        async def lost() -> Samples | None:
            found = await scrape(client, url)
            losses = "backlog_worker_lease_losses_total"
            return found if value(found, losses, role="coder", reason="revoked") == 1 else None

        found: Samples = await poll(lost, "the lease loss counted")
    finally:
        proc.terminate()
        proc.wait(30)
        reap(proc)
    assert value(found, "backlog_worker_runs_finished_total", role="coder", outcome="lost") == 1
    errors = "backlog_worker_tracker_errors_total"
    assert value(found, errors, action="heartbeat", kind="lease_lost") == 1
    assert value(found, "backlog_worker_slots_busy") == 0


def _waiting(stats: QueueStats) -> int | None:
    row = stats.for_role("coder")
    return None if row is None else row.waiting_count


def _run(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )


@pytest.mark.parametrize(
    ("listen", "says"),
    [
        ("nope", "must be HOST:PORT"),
        ("127.0.0.1:99999", "port must be a number from 0 to 65535"),
        (":9464", "must be HOST:PORT"),
    ],
)
async def test_a_bad_listen_value_is_a_config_error(
    tracker: Tracker, pipeline_id: str, tmp_path: Path, listen: str, says: str
) -> None:
    await add_tasks(tracker, pipeline_id, 1)
    done = await anyio.to_thread.run_sync(
        _run, write_worker_config(tmp_path, ["true"], listen=listen)
    )
    assert done.returncode == 2, done.stderr
    assert "[metrics] listen" in done.stderr and says in done.stderr
    assert "Traceback" not in done.stderr
    assert _waiting(await tracker.queue_stats()) == 1  # nothing claimed


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (
            "queue_interval_s = 0",
            "[metrics] queue_interval_s: Input should be greater than or equal",
        ),
        ("queue_interval = 1", "[metrics] queue_interval: unknown key"),
    ],
)
async def test_a_bad_metrics_key_is_a_config_error(
    tracker: Tracker, pipeline_id: str, tmp_path: Path, line: str, says: str
) -> None:
    await add_tasks(tracker, pipeline_id, 1)
    config = write_worker_config(tmp_path, ["true"])
    config.write_text(config.read_text().replace("queue_interval_s = 0.1", line))
    done = await anyio.to_thread.run_sync(_run, config)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
    assert _waiting(await tracker.queue_stats()) == 1  # nothing claimed


async def test_a_port_in_use_is_a_clear_error_before_any_claim(
    tracker: Tracker, pipeline_id: str, tmp_path: Path
) -> None:
    await add_tasks(tracker, pipeline_id, 1)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = write_worker_config(tmp_path, ["true"], listen=f"127.0.0.1:{port}")
        done = await anyio.to_thread.run_sync(_run, config)
    assert done.returncode == 2, done.stderr
    assert f"[metrics] listen: cannot listen on 127.0.0.1:{port}: Address already in use" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr
    assert _waiting(await tracker.queue_stats()) == 1  # nothing claimed
