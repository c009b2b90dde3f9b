"""The served tracker at the HTTP level: routes vs its OpenAPI document, JSON error bodies, the
two-token model, 429 with Retry-After, idempotency keys, size limits, store paths.

Raw httpx requests through ``httpx.ASGITransport`` against a real embedded tracker (a SQLite file
in ``tmp_path``), so the assertions are on what a NullTickets client would see on the wire.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.routing import Route

from tests.remote.fake_nulltickets import PIPELINE
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate
from tracker_client.serve.app import create_app
from tracker_client.serve.openapi import QUERY_PARAMS, openapi_document

ADMIN = "server-admin-token"


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[EmbeddedTracker]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"), max_backlog_depth=2)
    try:
        yield tracker
    finally:
        await tracker.aclose()


@pytest.fixture
async def http(embedded: EmbeddedTracker) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(embedded, api_token=ADMIN, max_request_bytes=50_000)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://127.0.0.1:7700",
        headers={"Authorization": f"Bearer {ADMIN}"},
    ) as client:
        yield client


async def _task(http: httpx.AsyncClient) -> tuple[str, dict[str, Any]]:
    pid = (await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()["id"]
    tid = (await http.post("/tasks", json={"pipeline_id": pid, "title": "t"})).json()["id"]
    claim = await http.post(
        "/leases/claim", json={"agent_id": "w", "agent_role": "coder", "lease_ttl_ms": 60_000}
    )
    assert claim.status_code == 200
    return tid, claim.json()


def _error(response: httpx.Response) -> dict[str, Any]:
    doc = json.loads(response.content)  # always valid JSON
    assert set(doc) == {"error"}
    return doc["error"]


def test_openapi_lists_exactly_the_routes_of_the_app() -> None:
    app = create_app(object())  # type: ignore[arg-type]  # routes only; the tracker is not used
    served = set()
    for route in app.routes:
        assert isinstance(route, Route)
        path = route.path.replace(":path}", "}")
        served |= {(m.lower(), path) for m in route.methods or () if m != "HEAD"}
    documented = {
        (method, path) for path, ops in openapi_document()["paths"].items() for method in ops
    }
    assert served == documented
    assert set(QUERY_PARAMS) <= documented  # query parameters only for routes that exist
    # Every $ref points at a schema that exists.
    text = json.dumps(openapi_document())
    schemas = openapi_document()["components"]["schemas"]
    for ref in {part.split('"')[0] for part in text.split("#/components/schemas/")[1:]}:
        assert ref in schemas, ref


@pytest.mark.anyio
async def test_openapi_and_health_are_public(http: httpx.AsyncClient) -> None:
    del http.headers["Authorization"]
    doc = (await http.get("/openapi.json")).json()
    assert doc["openapi"] == "3.1.0"
    assert (await http.get("/.well-known/openapi.json")).json() == doc
    health = (await http.get("/health")).json()
    assert health["status"] == "ok"
    assert "cancel" in health["extensions"] and health["limits"]["max_request_bytes"] == 50_000
    refused = await http.get("/pipelines")
    assert refused.status_code == 401 and _error(refused)["code"] == "unauthorized"


@pytest.mark.anyio
async def test_two_token_model(http: httpx.AsyncClient) -> None:
    tid, lease = await _task(http)
    run_id, token = lease["run"]["id"], lease["lease_token"]
    as_lease = {"Authorization": f"Bearer {token}"}
    # The admin token is refused on lease routes; the lease token works there.
    refused = await http.post(f"/runs/{run_id}/events", json={"kind": "x"})
    assert refused.status_code == 401 and _error(refused)["message"] == "Invalid token"
    ok = await http.post(f"/runs/{run_id}/events", json={"kind": "x"}, headers=as_lease)
    assert ok.status_code == 201
    # The lease token is refused on admin routes, including GET events (no NullTickets hole).
    for path in (f"/tasks/{tid}", f"/runs/{run_id}/events"):
        response = await http.get(path, headers=as_lease)
        assert response.status_code == 401, path
    anything = await http.get(f"/runs/{run_id}/events", headers={"Authorization": "Bearer x"})
    assert anything.status_code == 401
    assert (await http.get(f"/runs/{run_id}/events")).json()["items"][0]["kind"] == "x"
    missing = await http.post(
        f"/runs/{run_id}/events", json={"kind": "x"}, headers={"Authorization": ""}
    )
    assert missing.status_code == 401
    assert _error(missing)["message"] == "Missing Authorization header"
    # Wrong scheme spelling is refused as on NullTickets.
    lower = await http.get("/pipelines", headers={"Authorization": f"bearer {ADMIN}"})
    assert lower.status_code == 401


@pytest.mark.anyio
async def test_error_bodies_are_valid_json(http: httpx.AsyncClient) -> None:
    bad_json = await http.post(
        "/tasks", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert bad_json.status_code == 400 and _error(bad_json)["code"] == "invalid_json"
    missing = await http.post("/tasks", json={"title": "t"})
    assert _error(missing)["code"] == "invalid_json"
    assert "pipeline_id" in _error(missing)["message"]
    wrong_type = await http.post("/tasks", json={"pipeline_id": "p", "title": 5})
    assert _error(wrong_type)["code"] == "invalid_json" and "title" in _error(wrong_type)["message"]
    unknown = await http.get("/nowhere")
    assert unknown.status_code == 404 and _error(unknown)["code"] == "not_found"
    wrong_method = await http.delete("/pipelines")
    assert wrong_method.status_code == 404 and _error(wrong_method)["code"] == "not_found"
    reserved = await http.put("/store/search/k", json={"value": 1})
    assert reserved.status_code == 400 and _error(reserved)["code"] == "reserved_namespace"
    store_bad = await http.put("/store/ns/k", json={"val": 1})
    assert store_bad.status_code == 400 and _error(store_bad)["code"] == "invalid_json"
    limit = await http.get("/tasks?limit=many")
    assert limit.status_code == 400 and _error(limit)["code"] == "invalid_limit"


@pytest.mark.anyio
async def test_lease_errors_and_invalid_transition(http: httpx.AsyncClient) -> None:
    tid, lease = await _task(http)
    run_id, token = lease["run"]["id"], lease["lease_token"]
    as_lease = {"Authorization": f"Bearer {token}"}
    bad = await http.post(f"/runs/{run_id}/transition", json={"trigger": "nope"}, headers=as_lease)
    assert bad.status_code == 400
    assert _error(bad)["code"] == "invalid_transition" and _error(bad)["allowed"] == ["complete"]
    cancel = await http.post(f"/tasks/{tid}/cancel", json={})
    assert cancel.status_code == 200 and cancel.json()["revoked_lease"] is True
    revoked = await http.post(f"/leases/{lease['lease_id']}/heartbeat", headers=as_lease)
    assert revoked.status_code in (404, 410)
    gone = await http.post(f"/runs/{run_id}/fail", json={"error": "x"}, headers=as_lease)
    assert gone.status_code == 410 and _error(gone)["code"] == "revoked"
    again = await http.post(f"/tasks/{tid}/cancel", json={})
    assert again.status_code == 409 and _error(again)["code"] == "already_finished"


@pytest.mark.anyio
async def test_backlog_full_is_429_with_retry_after(http: httpx.AsyncClient) -> None:
    pid = (await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()["id"]
    for i in range(2):
        assert (await http.post("/tasks", json={"pipeline_id": pid, "title": f"{i}"})).is_success
    full = await http.post("/tasks", json={"pipeline_id": pid, "title": "x"})
    assert full.status_code == 429
    assert int(full.headers["retry-after"]) >= 1
    error = _error(full)
    assert (error["code"], error["role"], error["depth"], error["cap"]) == (
        "backlog_full",
        "coder",
        2,
        2,
    )


@pytest.mark.anyio
async def test_idempotency_key_header_is_honoured_and_a_204_is_not_cached(
    http: httpx.AsyncClient,
) -> None:
    pid = (await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()["id"]
    key = {"Idempotency-Key": "create-1"}
    body = {"pipeline_id": pid, "title": "once"}
    first = await http.post("/tasks", json=body, headers=key)
    second = await http.post("/tasks", json=body, headers=key)
    assert first.json() == second.json()
    assert len((await http.get("/tasks")).json()["items"]) == 1
    other = await http.post("/tasks", json={**body, "title": "other"}, headers=key)
    assert other.status_code == 409 and _error(other)["code"] == "idempotency_conflict"
    claim = {"agent_id": "w", "agent_role": "nobody", "lease_ttl_ms": 1000}
    ckey = {"Idempotency-Key": "claim-1"}
    assert (await http.post("/leases/claim", json=claim, headers=ckey)).status_code == 204
    claim["agent_role"] = "coder"
    got = await http.post("/leases/claim", json=claim, headers={"Idempotency-Key": "claim-2"})
    assert got.status_code == 200


@pytest.mark.anyio
async def test_a_retried_cancel_requeue_and_cancel_all_replay_with_their_key(
    http: httpx.AsyncClient,
) -> None:
    # docs/guarantees/nulltickets.md: Idempotency-Key holds for POST on every route; a plain
    # client retrying the extension writes after a lost answer gets the first answer (not 409,
    # not a count of 0).
    tid, _ = await _task(http)
    key = {"Idempotency-Key": "cancel-1"}
    first = await http.post(f"/tasks/{tid}/cancel", json={"reason": "stop"}, headers=key)
    again = await http.post(f"/tasks/{tid}/cancel", json={"reason": "stop"}, headers=key)
    assert (first.status_code, again.status_code) == (200, 200)
    assert first.json() == again.json() and first.json()["revoked_lease"] is True
    assert (await http.post(f"/tasks/{tid}/cancel", json={"reason": "stop"})).status_code == 409
    rkey = {"Idempotency-Key": "requeue-1"}
    first = await http.post(f"/tasks/{tid}/requeue", json={}, headers=rkey)
    again = await http.post(f"/tasks/{tid}/requeue", json={}, headers=rkey)
    assert (first.status_code, again.status_code, first.json()) == (200, 200, again.json())
    pid = (await http.get(f"/tasks/{tid}")).json()["pipeline_id"]
    akey = {"Idempotency-Key": "all-1"}
    body = {"pipeline_id": pid}
    first = await http.post("/ops/cancel-all", json=body, headers=akey)
    again = await http.post("/ops/cancel-all", json=body, headers=akey)
    assert first.json() == again.json() == {"cancelled": 1}


@pytest.mark.anyio
async def test_oversized_request_is_413(http: httpx.AsyncClient) -> None:
    big = await http.post(
        "/tasks", json={"pipeline_id": "p", "title": "t", "description": "d" * 60_000}
    )
    assert big.status_code == 413 and _error(big)["code"] == "request_too_large"


@pytest.mark.anyio
async def test_store_segments_are_percent_decoded_one_by_one(http: httpx.AsyncClient) -> None:
    put = await http.put("/store/team%20a/key%2F1", json={"value": {"v": 1}})
    assert put.status_code == 204 and put.content == b""
    entry = (await http.get("/store/team%20a/key%2F1")).json()
    assert (entry["namespace"], entry["key"], entry["value"]) == ("team a", "key/1", {"v": 1})
    assert [e["key"] for e in (await http.get("/store/team%20a")).json()] == ["key/1"]


@pytest.mark.anyio
async def test_task_without_runs_has_no_latest_run_key(http: httpx.AsyncClient) -> None:
    pid = (await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()["id"]
    tid = (await http.post("/tasks", json={"pipeline_id": pid, "title": "t"})).json()["id"]
    assert "latest_run" not in (await http.get(f"/tasks/{tid}")).json()


@pytest.mark.anyio
async def test_wait_for_work_sees_a_write_that_raced_with_its_start(
    embedded: EmbeddedTracker,
) -> None:
    from tracker_client.nulltickets.client import RemoteTracker

    app = create_app(embedded)
    idle = RemoteTracker("http://127.0.0.1:7700", transport=httpx.ASGITransport(app=app))
    writer = RemoteTracker("http://127.0.0.1:7700", transport=httpx.ASGITransport(app=app))
    try:
        pid = await writer.create_pipeline("p", PIPELINE)
        await idle.health()  # the idle side's last look at the rail
        # A task is created *before* the idle side's wait request reaches the server (the race
        # a worker has between "no work" and "start waiting"): the wait must return at once.
        await writer.create_task(TaskCreate(pipeline_id=pid, title="t"))
        with anyio.fail_after(5):
            await idle.wait_for_work(30)
        # Nothing new since: the next wait lasts its timeout.
        started = anyio.current_time()
        await idle.wait_for_work(0.3)
        assert anyio.current_time() - started >= 0.25
        # Claims and heartbeats do not count as new work (idle workers must not wake each other).
        lease = await writer.claim("w", "coder", 60_000)
        assert lease is not None
        await writer.heartbeat(lease)
        await idle.health()
        await writer.claim("w", "coder", 60_000)  # no work: 204
        started = anyio.current_time()
        await idle.wait_for_work(0.3)
        assert anyio.current_time() - started >= 0.25
    finally:
        await idle.aclose()
        await writer.aclose()
