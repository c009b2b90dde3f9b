"""The served tracker's Prometheus metrics: a real ``tracker serve --metrics-listen`` process on
a real rail file, scraped with httpx on its own port; the bearer token on a protected rail (401
without it), the request counters by operation and status class, the queue per role, claims
refused by a rate limit, lease expiries however they are swept (maintenance, another worker's
claim); bad and busy addresses exit 2."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from tests.remote.fixtures import wait_listening
from tests.worker.daemonkit import TOKEN, clean_env, make_rail
from tests.worker.test_metrics import Samples, poll, samples, value
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.anyio

_CLI = (sys.executable, "-m", "worker", "tracker", "serve")


@contextlib.contextmanager
def served(tmp_path: Path, token: str | None) -> Iterator[tuple[str, str, Path]]:
    """A real ``tracker serve --port 0 --metrics-listen 127.0.0.1:0`` on a new rail with the
    ``flow`` pipeline (role ``coder``); yields (API URL, metrics URL, rail file)."""
    db = make_rail(tmp_path)
    args = ["--tracker", f"sqlite://{db}", "--port", "0", "--metrics-listen", "127.0.0.1:0"]
    if token is not None:
        (tmp_path / "token").write_text(token + "\n")
        args += ["--token-file", str(tmp_path / "token")]
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*_CLI, *args], stdout=subprocess.DEVNULL, stderr=stderr, env=clean_env()
        )
    try:
        api = wait_listening(log, proc, 30)
        found = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", log.read_text())
        assert found, log.read_text()
        yield api, found.group(1), db
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert TOKEN not in log.read_text()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c


async def add_tasks(db: Path, n: int) -> None:
    tracker = await open_tracker(f"sqlite://{db}")
    try:
        [pipeline] = await tracker.list_pipelines()
        await tracker.create_tasks(
            [TaskCreate(pipeline_id=pipeline.id, title=f"t{i}") for i in range(n)]
        )
    finally:
        await tracker.aclose()


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def scrape(client: httpx.AsyncClient, url: str, token: str | None = TOKEN) -> Samples:
    answer = await client.get(url, headers=auth(token) if token else {})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert TOKEN not in answer.text
    return samples(answer.text)


def claim(ttl_ms: int = 60_000) -> dict[str, object]:
    return {"agent_id": "a1", "agent_role": "coder", "lease_ttl_ms": ttl_ms}


@pytest.mark.timeout(60)
async def test_a_protected_rail_asks_for_the_token_and_counts_requests(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    with served(tmp_path, TOKEN) as (api, url, db):
        for headers in ({}, auth("wrong-token"), {"Authorization": TOKEN}):
            refused = await client.get(url, headers=headers)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert "backlog_tracker" not in refused.text
        assert (await client.post(f"{api}/leases/claim", json=claim())).status_code == 401
        assert (
            await client.post(f"{api}/leases/claim", json=claim(), headers=auth())
        ).status_code == 204
        await add_tasks(db, 3)
        taken = await client.post(f"{api}/leases/claim", json=claim(), headers=auth())
        assert taken.status_code == 200
        assert (await client.get(f"{api}/health")).status_code == 200
        assert (await client.get(f"{api}/no/such/route", headers=auth())).status_code == 404
        found = await scrape(client, url)
        assert (
            await client.get(url.replace("/metrics", "/other"), headers=auth())
        ).status_code == 404
        assert (await client.post(url, headers=auth())).status_code == 405
    requests = "backlog_tracker_requests_total"
    assert value(found, requests, operation="claim", status_class="4xx") == 1
    assert value(found, requests, operation="claim", status_class="2xx") == 2
    assert value(found, requests, operation="health", status_class="2xx") == 1
    assert value(found, requests, operation="unknown", status_class="4xx") == 1
    durations = "backlog_tracker_request_duration_seconds_count"
    assert value(found, durations, operation="claim") == 3
    assert value(found, "backlog_tracker_queue_waiting", role="coder") == 2
    assert value(found, "backlog_tracker_queue_running", role="coder") == 1
    assert value(found, "backlog_tracker_queue_dead_lettered", role="coder") == 0
    assert value(found, "backlog_tracker_open_connections") >= 1  # this client's
    assert value(found, "backlog_tracker_connections_refused_total") == 0
    assert not [k for k in found if k[0] == "backlog_tracker_claims_rate_limited_total"]


@pytest.mark.timeout(60)
async def test_an_open_rail_serves_metrics_without_a_token(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    with served(tmp_path, None) as (api, url, _):
        assert (await client.get(f"{api}/health")).status_code == 200
        found = await scrape(client, url, token=None)
    requests = "backlog_tracker_requests_total"
    assert value(found, requests, operation="health", status_class="2xx") == 1


@pytest.mark.timeout(60)
async def test_claims_refused_by_a_rate_limit_are_counted(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    with served(tmp_path, TOKEN) as (api, url, db):
        await add_tasks(db, 3)
        limit = await client.put(
            f"{api}/rate-limits/coder", json={"max_running": 1}, headers=auth()
        )
        assert limit.status_code == 200, limit.text
        assert (
            await client.post(f"{api}/leases/claim", json=claim(), headers=auth())
        ).status_code == 200
        for _ in range(2):  # tasks wait, but the cap of one leased task is reached
            refused = await client.post(f"{api}/leases/claim", json=claim(), headers=auth())
            assert refused.status_code == 204
        found = await scrape(client, url)
    assert value(found, "backlog_tracker_claims_rate_limited_total", role="coder") == 2
    assert value(found, "backlog_tracker_queue_waiting", role="coder") == 2


@pytest.mark.timeout(60)
async def test_lease_expiries_come_from_maintenance(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    with served(tmp_path, TOKEN) as (api, url, db):
        await add_tasks(db, 1)
        taken = await client.post(f"{api}/leases/claim", json=claim(ttl_ms=200), headers=auth())
        assert taken.status_code == 200
        passes = 0

        async def expired() -> bool:
            nonlocal passes
            answer = await client.post(f"{api}/ops/maintenance", headers=auth())
            assert answer.status_code == 200, answer.text
            passes += 1
            return bool(answer.json()["expired_leases"])

        await poll(expired, "maintenance reclaiming the lapsed lease", timeout=20)
        found = await scrape(client, url)
    assert value(found, "backlog_tracker_lease_expiries_total") == 1
    assert value(found, "backlog_tracker_maintenance_passes_total") == passes
    requests = "backlog_tracker_requests_total"
    assert value(found, requests, operation="maintenance", status_class="2xx") == passes


@pytest.mark.timeout(60)
async def test_lease_expiries_swept_by_another_workers_claim_are_counted(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    """The common case of a dead worker: its leases lapse and the next claim of another worker
    reclaims them; no maintenance pass runs. Each one is counted (was 0: only maintenance
    reports were)."""
    with served(tmp_path, TOKEN) as (api, url, db):
        await add_tasks(db, 3)
        for _ in range(3):  # the worker that dies: three short leases, never heartbeaten
            taken = await client.post(f"{api}/leases/claim", json=claim(ttl_ms=200), headers=auth())
            assert taken.status_code == 200
        reclaimed: list[str] = []

        async def swept() -> bool:
            answer = await client.post(
                f"{api}/leases/claim",
                json={"agent_id": "a2", "agent_role": "coder", "lease_ttl_ms": 60_000},
                headers=auth(),
            )
            assert answer.status_code in (200, 204), answer.text
            if answer.status_code == 200:
                reclaimed.append(answer.json()["task"]["id"])
            return len(reclaimed) == 3

        await poll(swept, "another worker's claims taking the lapsed tasks back", timeout=20)
        found = await scrape(client, url)
    assert value(found, "backlog_tracker_lease_expiries_total") == 3
    assert value(found, "backlog_tracker_crash_looped_total") == 0
    assert (value(found, "backlog_tracker_maintenance_passes_total") or 0) == 0


def _serve_fails(tmp_path: Path, listen: str) -> subprocess.CompletedProcess[str]:
    db = make_rail(tmp_path)
    return subprocess.run(
        [*_CLI, "--tracker", f"sqlite://{db}", "--port", "0", "--metrics-listen", listen],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )


@pytest.mark.parametrize(
    ("listen", "says"),
    [("nope", "must be HOST:PORT"), ("127.0.0.1:70000", "port must be a number")],
)
async def test_a_bad_metrics_listen_value_exits_2(tmp_path: Path, listen: str, says: str) -> None:
    done = await anyio.to_thread.run_sync(_serve_fails, tmp_path, listen)
    assert done.returncode == 2, done.stderr
    assert "--metrics-listen" in done.stderr and says in done.stderr
    assert "Traceback" not in done.stderr and "listening on" not in done.stderr


async def test_a_metrics_port_in_use_exits_2_before_serving(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = await anyio.to_thread.run_sync(_serve_fails, tmp_path, f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    assert f"--metrics-listen: cannot listen on 127.0.0.1:{port}: Address already in use" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr and "listening on" not in done.stderr
