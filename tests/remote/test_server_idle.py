"""Idle workers on a served rail do not wake each other up (issue 10, item 17).

Only a write that changed something moves the rail generation (``X-Rail-Generation``) that
``GET /ops/wait-for-work?since=`` compares: a maintenance pass with nothing to do, or a
cancel-all of no task, must not, or every idle worker's periodic maintenance sends every other
worker round a claim and a new wait. Checked on the server's answers, and with three real idle
``backlog-worker run`` processes against a real ``tracker serve``, counting their requests.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from bench.idle import CountingProxy
from tests.remote.fixtures import serve_on_port
from tests.worker.daemonkit import clean_env, serve_tracker, wait_for
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import GENERATION_HEADER, create_app

CLI = [sys.executable, "-m", "worker"]
PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


@pytest.fixture
async def base(tmp_path: Path) -> AsyncIterator[str]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        async with serve_on_port(create_app(tracker)) as url:
            yield url
    finally:
        await tracker.aclose()


@pytest.mark.anyio
async def test_a_write_that_changed_nothing_does_not_move_the_generation(base: str) -> None:
    async with httpx.AsyncClient(base_url=base) as client:
        pid = (await client.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()
        before = (await client.get("/health")).headers[GENERATION_HEADER]
        idle = await client.post("/ops/maintenance")
        assert idle.status_code == 200 and idle.headers[GENERATION_HEADER] == before
        none = await client.post("/ops/cancel-all", json={"role": "coder"})
        assert none.json() == {"cancelled": 0} and none.headers[GENERATION_HEADER] == before
        waited = await client.get("/ops/wait-for-work", params={"since": before, "timeout_ms": 200})
        assert waited.json() == {"status": "ok"}  # slept its timeout: nothing new to claim

        # A write that changes something still moves it, and a waiter sees it.
        task = {"pipeline_id": pid["id"], "title": "t"}
        created = await client.post("/tasks", json=task)
        assert created.headers[GENERATION_HEADER] != before
        changed = await client.get(
            "/ops/wait-for-work", params={"since": before, "timeout_ms": 200}
        )
        assert changed.json() == {"status": "changed"}

        # Maintenance that reclaims an expired lease makes work claimable again: it counts.
        lease = await client.post(
            "/leases/claim", json={"agent_id": "w", "agent_role": "coder", "lease_ttl_ms": 1}
        )
        assert lease.status_code == 200
        seen = lease.headers[GENERATION_HEADER]
        deadline = time.monotonic() + 10
        while True:
            report = await client.post("/ops/maintenance")
            if report.json()["expired_leases"]:
                break
            assert report.headers[GENERATION_HEADER] == seen
            assert time.monotonic() < deadline, "the 1 ms lease never expired"
            await asyncio.sleep(0.01)
        assert report.headers[GENERATION_HEADER] != seen


def _says_running(log: Path) -> bool:
    return "running:" in log.read_text()


@pytest.fixture
def served_rail(tmp_path: Path) -> Iterator[int]:
    """A rail with one pipeline and no task, served by a real ``tracker serve``; its port."""
    with serve_tracker(tmp_path, token=None) as (url, _db):
        yield int(url.rsplit(":", 1)[1])


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_three_idle_workers_send_at_most_one_request_a_second(
    tmp_path: Path, served_rail: int
) -> None:
    workers = 3
    # Default worker settings: maintenance every ~5 s per worker; a pass that moved the
    # generation would send the other workers round a claim and a new wait.
    proxies = [CountingProxy(served_rail) for _ in range(workers)]
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        for i, proxy in enumerate(proxies):
            config = tmp_path / f"w{i}.toml"
            config.write_text(
                f'[tracker]\nurl = "http://127.0.0.1:{proxy.port}"\n'
                '[[roles]]\nname = "coder"\nexecutor = "command"\n'
                '[roles.options]\nargv = ["true"]\n'
            )
            logs.append(tmp_path / f"worker{i}.log")
            with logs[-1].open("wb") as err:
                procs.append(
                    subprocess.Popen(
                        [*CLI, "run", "--config", str(config)],
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        env=clean_env(),
                    )
                )
        for log in logs:
            wait_for(functools.partial(_says_running, log), 60, log.name)
        # Not a readiness wait: the measurement starts past the start-up claims and the idle
        # back-off's climb to its ceiling (idle_max_s 2 s), and lasts 8 s (8 maintenance passes
        # per worker).
        time.sleep(6)
        start, t0 = [p.connections for p in proxies], time.monotonic()
        time.sleep(8)
        elapsed = time.monotonic() - t0
        rates = [(p.connections - s) / elapsed for p, s in zip(proxies, start, strict=True)]
        assert all(p.poll() is None for p in procs), [log.read_text() for log in logs]
        assert all(rate <= 1.0 for rate in rates), (rates, [p.lines[-12:] for p in proxies])
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        for proxy in proxies:
            proxy.close()
