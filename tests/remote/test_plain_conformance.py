"""A plain NullTickets client against ``backlog-worker tracker serve``.

The client here sends only what plain NullTickets documents (docs/reference/http-api.md): no
extension fields (no ``run_id`` in a heartbeat, no ``retryable``), no ``Idempotency-Key`` or other
extension headers, and one request per connection (a fresh client per request, with
``Connection: close``, as NullTickets itself answers). It runs the whole worker cycle a
NullTickets worker runs -- pipeline, tasks, claim, events, heartbeats (with ``{}`` and with no
body at all), transition, fail until dead-lettered, and the reads -- against a real server
process on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.remote.fixtures import wait_listening
from tracker_client.embedded import EmbeddedTracker

SERVE = [sys.executable, "-m", "worker", "tracker", "serve"]
ADMIN = "conformance-admin-token-0123"

DEFINITION = {
    "initial": "todo",
    "states": {
        "todo": {"agent_role": "coder", "description": "write it"},
        "review": {"agent_role": "reviewer"},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "todo", "to": "review", "trigger": "submit", "instructions": "check it"},
        {"from": "review", "to": "done", "trigger": "approve"},
    ],
}


@dataclass
class Answer:
    """One HTTP answer: status, parsed JSON body (None when empty) and headers."""

    status: int
    body: Any
    headers: httpx.Headers


@dataclass
class PlainClient:
    """One connection per request, only documented headers and fields."""

    base: str

    def call(self, method: str, path: str, token: str | None = ADMIN, body: Any = None) -> Answer:
        headers = {"Connection": "close"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        with httpx.Client(base_url=self.base, timeout=20.0) as client:
            if body is None:
                response = client.request(method, path, headers=headers)
            else:
                response = client.request(method, path, headers=headers, json=body)
        parsed: Any = response.json() if response.content else None
        if response.status_code >= 400:
            # Errors are always {"error":{"code","message"}} (here: always valid JSON).
            assert isinstance(parsed["error"]["code"], str), parsed
            assert isinstance(parsed["error"]["message"], str), parsed
        return Answer(response.status_code, parsed, response.headers)


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[PlainClient]:
    """A real ``tracker serve`` process with an admin token (from the environment), on a rail
    created beforehand (as ``pipeline create`` would)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["BACKLOG_WORKER_API_TOKEN"] = ADMIN
    rail = tmp_path / "rail.db"

    async def make_rail() -> None:
        tracker = await EmbeddedTracker.open(str(rail))
        await tracker.aclose()

    anyio.run(make_rail)
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*SERVE, "--tracker", f"sqlite://{rail}", "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    try:
        yield PlainClient(wait_listening(log, proc, 30.0))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def _claim(client: PlainClient, role: str) -> dict[str, Any]:
    got = client.call(
        "POST",
        "/leases/claim",
        body={"agent_id": "plain-1", "agent_role": role, "lease_ttl_ms": 60_000},
    )
    assert got.status == 200, got.body
    lease: dict[str, Any] = got.body
    assert re.fullmatch(r"[0-9a-f]{64}", lease["lease_token"])
    assert lease["run"]["status"] == "running"
    assert lease["run"]["agent_role"] == role
    assert isinstance(lease["expires_at_ms"], int)
    return lease


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_plain_nulltickets_client_runs_the_whole_worker_cycle(plain: PlainClient) -> None:
    health = plain.call("GET", "/health", token=None)
    assert health.status == 200 and health.body["status"] == "ok"
    assert plain.call("GET", "/pipelines", token=None).status == 401  # admin routes need a token

    # -- pipeline and tasks
    created = plain.call("POST", "/pipelines", body={"name": "plain", "definition": DEFINITION})
    assert created.status == 201, created.body
    pid = created.body["id"]
    assert plain.call("GET", f"/pipelines/{pid}").body["name"] == "plain"
    assert [p["id"] for p in plain.call("GET", "/pipelines").body] == [pid]
    task = plain.call(
        "POST",
        "/tasks",
        body={
            "pipeline_id": pid,
            "title": "first",
            "description": "the one that passes",
            "priority": 5,
            "metadata": {"k": 1},
        },
    )
    assert task.status == 201, task.body
    tid = task.body["id"]
    bulk = plain.call(
        "POST",
        "/tasks/bulk",
        body={
            "tasks": [
                {
                    "pipeline_id": pid,
                    "title": "second",
                    "description": "the one that fails",
                    "retry_policy": {"max_attempts": 2, "retry_delay_ms": 0},
                }
            ]
        },
    )
    assert bulk.status == 201, bulk.body
    (failing,) = bulk.body["ids"]
    detail = plain.call("GET", f"/tasks/{tid}").body
    assert detail["stage"] == "todo" and detail["task_version"] == 1
    assert "latest_run" not in detail  # absent, not null, before the first claim
    listed = plain.call("GET", "/tasks?stage=todo&limit=10").body
    assert {t["id"] for t in listed["items"]} == {tid, failing}

    # -- claim, events, heartbeats, transition
    lease = _claim(plain, "coder")
    assert lease["task"]["id"] == tid  # priority 5 first
    run_id, lease_id, token = lease["run"]["id"], lease["lease_id"], lease["lease_token"]
    event = plain.call(
        "POST", f"/runs/{run_id}/events", token=token, body={"kind": "log", "data": {"n": 1}}
    )
    assert event.status == 201 and isinstance(event.body["id"], int), event.body
    beat = plain.call("POST", f"/leases/{lease_id}/heartbeat", token=token, body={})
    assert beat.status == 200, beat.body
    assert beat.body["expires_at_ms"] >= lease["expires_at_ms"]
    bare = plain.call("POST", f"/leases/{lease_id}/heartbeat", token=token)  # no body at all
    assert bare.status == 200, bare.body
    assert bare.body["expires_at_ms"] >= beat.body["expires_at_ms"]
    wrong = plain.call("POST", f"/leases/{lease_id}/heartbeat", token="0" * 64, body={})
    assert wrong.status == 401 and wrong.body["error"]["code"] == "unauthorized"
    admin_there = plain.call("POST", f"/leases/{lease_id}/heartbeat", body={})
    assert admin_there.status == 401  # only the lease token works on lease routes
    unknown = plain.call(
        "POST", "/leases/00000000-0000-4000-8000-000000000000/heartbeat", token=token, body={}
    )
    assert unknown.status == 404, unknown.body
    events = plain.call("GET", f"/runs/{run_id}/events").body
    assert [e["kind"] for e in events["items"]] == ["log"]
    assert events["items"][0]["data"] == {"n": 1}
    moved = plain.call(
        "POST", f"/runs/{run_id}/transition", token=token, body={"trigger": "submit"}
    )
    assert moved.status == 200, moved.body
    assert moved.body["previous_stage"] == "todo" and moved.body["new_stage"] == "review"
    assert moved.body["trigger"] == "submit"
    gone = plain.call("POST", f"/leases/{lease_id}/heartbeat", token=token, body={})
    assert gone.status == 404, gone.body  # the lease ended with the transition
    after = plain.call("GET", f"/tasks/{tid}").body
    assert after["stage"] == "review" and after["latest_run"]["status"] == "completed"

    review = _claim(plain, "reviewer")
    assert review["task"]["id"] == tid
    done = plain.call(
        "POST",
        f"/runs/{review['run']['id']}/transition",
        token=review["lease_token"],
        body={"trigger": "approve"},
    )
    assert done.status == 200 and done.body["new_stage"] == "done", done.body

    # -- fail until dead-lettered (max_attempts 2, no delay)
    for attempt in (1, 2):
        lease = _claim(plain, "coder")
        assert lease["task"]["id"] == failing and lease["run"]["attempt"] == attempt
        beat = plain.call(
            "POST", f"/leases/{lease['lease_id']}/heartbeat", token=lease["lease_token"], body={}
        )
        assert beat.status == 200, beat.body
        failed = plain.call(
            "POST",
            f"/runs/{lease['run']['id']}/fail",
            token=lease["lease_token"],
            body={"error": "boom"},
        )
        assert failed.status == 200 and failed.body["status"] == "failed", failed.body
    dead = plain.call("GET", f"/tasks/{failing}").body
    assert dead["dead_letter_reason"] is not None
    assert dead["latest_run"]["status"] == "failed" and dead["latest_run"]["attempt"] == 2
    nothing = plain.call(
        "POST", "/leases/claim", body={"agent_id": "plain-1", "agent_role": "coder"}
    )
    assert nothing.status == 204 and nothing.body is None

    # -- the other reads and writes a worker makes
    artifact = plain.call(
        "POST",
        "/artifacts",
        body={"kind": "log", "uri": "file:///x", "task_id": tid, "run_id": run_id},
    )
    assert artifact.status == 201, artifact.body
    arts = plain.call("GET", f"/artifacts?task_id={tid}").body["items"]
    assert [a["id"] for a in arts] == [artifact.body["id"]]
    queue = plain.call("GET", "/ops/queue").body
    assert isinstance(queue["roles"], list) and isinstance(queue["generated_at_ms"], int)
    assert plain.call("PUT", "/store/ns/k", body={"value": {"a": 1}}).status == 204
    assert plain.call("GET", "/store/ns/k").body["value"] == {"a": 1}
    census = plain.call("GET", "/health", token=None).body
    assert census["active_leases"] == 0
    assert {s["stage"]: s["count"] for s in census["tasks_by_stage"]} == {"done": 1, "todo": 1}
