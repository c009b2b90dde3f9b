"""Every integer a client sends the served tracker, at the edges of what JSON can carry: a clear
400 or an accepted request, never a 5xx, and a task that stays failable.

``retry_delay_ms`` of 2**63-1 once made a task unfailable: each ``fail`` overflowed ("int too
large") and the task was claimed 3 times with ``max_attempts`` 2. Over real HTTP on 127.0.0.1
against an embedded rail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.remote.fixtures import serve_on_port
from tracker_client.bounds import MAX_DURATION_MS, MAX_EPOCH_MS
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PIPELINE = {
    "initial": "todo",
    "states": {
        "todo": {"agent_role": "coder"},
        "review": {"human": True},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "todo", "to": "done", "trigger": "complete"},
        {"from": "todo", "to": "review", "trigger": "ask"},
        {"from": "review", "to": "done", "trigger": "approve"},
    ],
}
#: Past int64 both ways, int64's own edges, far past any date, and the small ones.
EXTREMES = (2**63 - 1, 2**63, -(2**63) - 1, -(2**63), 10**30, -1, 0)


class Rail:
    """A served rail and a client; helpers that make a task, a lease, a human-step task."""

    def __init__(self, http: httpx.AsyncClient, pipeline: str) -> None:
        self.http = http
        self.pipeline = pipeline

    async def task(self) -> str:
        answer = await self.http.post("/tasks", json={"pipeline_id": self.pipeline, "title": "t"})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    async def lease(self) -> dict[str, Any]:
        await self.task()
        answer = await self.http.post(
            "/leases/claim", json={"agent_id": "a", "agent_role": "coder", "lease_ttl_ms": 60_000}
        )
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


@pytest.fixture
async def rail(tmp_path: Path) -> AsyncIterator[Rail]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        async with (
            serve_on_port(create_app(tracker)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            answer = await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})
            yield Rail(http, answer.json()["id"])
    finally:
        await tracker.aclose()


Send = Callable[[Rail, int], Any]


async def _task_field(rail: Rail, name: str, value: int) -> httpx.Response:
    body: dict[str, Any] = {"pipeline_id": rail.pipeline, "title": "t"}
    if name.startswith("retry_policy."):
        body["retry_policy"] = {name.split(".", 1)[1]: value}
    else:
        body[name] = value
    return await rail.http.post("/tasks", json=body)


async def _lease_call(rail: Rail, what: str, value: int) -> httpx.Response:
    lease = await rail.lease()
    auth = {"Authorization": f"Bearer {lease['lease_token']}"}
    if what == "heartbeat":
        return await rail.http.post(
            f"/leases/{lease['lease_id']}/heartbeat", json={"lease_ttl_ms": value}, headers=auth
        )
    return await rail.http.post(
        f"/runs/{lease['run']['id']}/transition",
        json={"trigger": "complete", "expected_task_version": value},
        headers=auth,
    )


async def _query(rail: Rail, path: str, name: str, value: int) -> httpx.Response:
    if "{task}" in path:
        path = path.replace("{task}", await rail.task())
    if "{run}" in path:
        path = path.replace("{run}", (await rail.lease())["run"]["id"])
    return await rail.http.get(path, params={name: str(value)})


_TASK_FIELDS = (
    "priority",
    "expires_at_ms",
    "queue_ttl_ms",
    "max_stale_attempts",
    "run_at_ms",
    "delay_ms",
    "dedupe_window_ms",
    "retry_policy.max_attempts",
    "retry_policy.retry_delay_ms",
    "retry_policy.max_retry_delay_ms",
)
_QUERIES = (
    ("/tasks", "limit"),
    ("/runs/{run}/events", "limit"),
    ("/artifacts", "limit"),
    ("/ops/queue", "near_expiry_ms"),
    ("/ops/queue", "stuck_ms"),
    ("/tasks/{task}/wait", "timeout_ms"),
    ("/tasks/{task}/events", "limit"),
    ("/tasks/{task}/spans", "limit"),
)


async def _bodies(rail: Rail, name: str, value: int) -> httpx.Response:
    http = rail.http
    if name == "claim":
        body = {"agent_id": "a", "agent_role": "nobody", "lease_ttl_ms": value}
        return await http.post("/leases/claim", json=body)
    if name == "claim_many":
        body = {"agent_id": "a", "agent_role": "nobody", "lease_ttl_ms": 1000, "n": value}
        return await http.post("/leases/claim-many", json=body)
    if name == "artifact":
        task = await rail.task()
        body = {"kind": "log", "uri": "file:///x", "task_id": task, "size_bytes": value}
        return await http.post("/artifacts", json=body)
    if name == "human":
        lease = await rail.lease()
        await http.post(
            f"/runs/{lease['run']['id']}/transition",
            json={"trigger": "ask"},
            headers={"Authorization": f"Bearer {lease['lease_token']}"},
        )
        return await http.post(
            f"/tasks/{lease['task']['id']}/transition",
            json={"trigger": "approve", "expected_task_version": value},
        )
    if name == "purge":
        return await http.post("/ops/purge", json={"older_than_ms": value, "dry_run": True})
    if name == "requeue_all":
        return await http.post("/ops/requeue-all", json={"since_ms": value, "dry_run": True})
    if name == "schedule":
        body = {
            "schedule": "s",
            "pipeline_id": rail.pipeline,
            "cron": "0 * * * *",
            "title": "t",
            "priority": value,
            "replace": True,
        }
        return await http.post("/schedules", json=body)
    if name == "rate_limit":
        return await http.put("/rate-limits/coder", json={"max_running": value})
    worker = {
        "host": "h",
        "pid": 1,
        "version": "1",
        "roles": ["coder"],
        "slots": 1,
        "agent_id": "a",
        "started_at_ms": 1,
    }
    return await http.put("/workers/w1", json={**worker, name: value})


_BODIES = (
    "claim",
    "claim_many",
    "artifact",
    "human",
    "purge",
    "requeue_all",
    "schedule",
    "rate_limit",
    "pid",
    "slots",
    "started_at_ms",
    "lost_after_ms",
)


async def test_no_integer_at_any_edge_is_answered_as_a_server_error(rail: Rail) -> None:
    failures: list[str] = []

    async def check(what: str, value: int, answer: httpx.Response) -> None:
        if answer.status_code >= 500:
            failures.append(f"{what}={value}: {answer.status_code} {answer.text[:200]}")
        elif answer.status_code == 400:
            assert answer.json()["error"]["message"], what

    for value in EXTREMES:
        for name in _TASK_FIELDS:
            await check(f"POST /tasks {name}", value, await _task_field(rail, name, value))
        for what in ("heartbeat", "transition"):
            await check(what, value, await _lease_call(rail, what, value))
        for path, name in _QUERIES:
            await check(f"GET {path}?{name}", value, await _query(rail, path, name, value))
        for name in _BODIES:
            await check(name, value, await _bodies(rail, name, value))
    assert failures == []


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("retry_policy.retry_delay_ms", 2**63 - 1, "retry_delay_ms"),
        ("retry_policy.retry_delay_ms", MAX_DURATION_MS + 1, "retry_delay_ms"),
        ("retry_policy.max_retry_delay_ms", 2**63 - 1, "max_retry_delay_ms"),
        ("queue_ttl_ms", 2**62, "queue_ttl_ms"),
        ("expires_at_ms", MAX_EPOCH_MS + 1, "expires_at_ms"),
        ("priority", 2**63, "priority"),
    ],
)
async def test_an_out_of_range_number_is_a_400_naming_the_field(
    rail: Rail, field: str, value: int, says: str
) -> None:
    answer = await _task_field(rail, field, value)
    assert answer.status_code == 400, answer.text
    assert says in answer.json()["error"]["message"]
    listed = await rail.http.get("/tasks", params={"limit": "10"})
    assert listed.json()["items"] == []  # nothing written


async def test_the_longest_retry_delay_still_lets_the_task_fail(rail: Rail) -> None:
    body = {
        "pipeline_id": rail.pipeline,
        "title": "t",
        "retry_policy": {"max_attempts": 2, "retry_delay_ms": MAX_DURATION_MS},
    }
    assert (await rail.http.post("/tasks", json=body)).status_code == 201
    claim = {"agent_id": "a", "agent_role": "coder", "lease_ttl_ms": 60_000}
    lease = (await rail.http.post("/leases/claim", json=claim)).json()
    failed = await rail.http.post(
        f"/runs/{lease['run']['id']}/fail",
        json={"error": "boom"},
        headers={"Authorization": f"Bearer {lease['lease_token']}"},
    )
    assert failed.status_code == 200, failed.text
    assert failed.json()["retry_scheduled"] is True
    assert (await rail.http.post("/leases/claim", json=claim)).status_code == 204  # not yet due
