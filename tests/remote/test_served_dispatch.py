"""The served app's own dispatch (one match against the contract's index, no router): what a
client sees at its edges. Raw httpx through ``httpx.ASGITransport`` against a real embedded
tracker (a SQLite file in ``tmp_path``), and one real ``tracker serve`` for HEAD on the wire."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.remote.fake_nulltickets import PIPELINE
from tracker_client.contract import table as contract
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import GENERATION_HEADER, ROUTES, create_app

ADMIN = "dispatch-admin-token"


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(tracker, api_token=ADMIN)),
            base_url="http://127.0.0.1:7700",
            headers={"Authorization": f"Bearer {ADMIN}"},
        ) as client:
            yield client
    finally:
        await tracker.aclose()


def _code(response: httpx.Response) -> str:
    code: str = json.loads(response.content)["error"]["code"]  # always valid JSON
    return code


@pytest.mark.anyio
async def test_unknown_paths_are_404_json_and_a_trailing_slash_is_no_route(
    http: httpx.AsyncClient,
) -> None:
    for path in ("/tasks/", "/pipelines/", "/runs//events", "/tasks/a/b/c/d", "//"):
        answer = await http.get(path)
        assert (answer.status_code, _code(answer)) == (404, "not_found"), path
        assert "location" not in answer.headers  # no redirect to the path without the slash
    # Unknown routes need the admin token, as on NullTickets (nothing is said about the table).
    anonymous = await http.get("/nowhere", headers={"Authorization": ""})
    assert (anonymous.status_code, _code(anonymous)) == (401, "unauthorized")


@pytest.mark.anyio
async def test_a_known_path_with_another_method_is_404_not_405(http: httpx.AsyncClient) -> None:
    for method, path in (("PUT", "/pipelines"), ("PATCH", "/tasks"), ("DELETE", "/health")):
        answer = await http.request(method, path)
        assert (answer.status_code, _code(answer)) == (404, "not_found"), (method, path)


@pytest.mark.anyio
async def test_head_answers_as_get_without_a_body(http: httpx.AsyncClient) -> None:
    get = await http.get("/health")
    head = await http.head("/health")
    assert (get.status_code, head.status_code) == (200, 200)
    assert head.content == b""
    assert head.headers["content-length"] == get.headers["content-length"]
    assert GENERATION_HEADER.lower() in {name.lower() for name in head.headers}


@pytest.mark.anyio
async def test_path_parameters_are_decoded_per_segment(http: httpx.AsyncClient) -> None:
    pid = (await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()["id"]
    tid = (await http.post("/tasks", json={"pipeline_id": pid, "title": "t"})).json()["id"]
    assert (await http.get(f"/tasks/{tid}")).json()["id"] == tid
    # An encoded "/" stays inside its segment: an id that is no task, not another route.
    slashed = await http.get("/tasks/a%2Fb")
    assert (slashed.status_code, _code(slashed)) == (404, "not_found")
    assert "a/b" in slashed.json()["error"]["message"]  # the tracker looked the id up
    put = await http.put("/store/team%20a/key%2F1", json={"value": {"n": 1}})
    assert put.status_code == 204
    got = await http.get("/store/team%20a/key%2F1")
    assert got.json()["value"] == {"n": 1}


def test_the_route_table_is_the_contract_in_order() -> None:
    assert [route.name for route in ROUTES] == [op.name for op in contract.OPERATIONS]


@pytest.mark.anyio
async def test_answers_written_by_the_models_own_json_read_back_as_sent(
    http: httpx.AsyncClient,
) -> None:
    pid = (await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()["id"]
    metadata = {"name": "Zoë ✓", "ratio": 0.1, "big": 10**20, "tiny": 1e-7, "nested": [None, True]}
    task = {"pipeline_id": pid, "title": "t", "metadata": metadata}
    assert (await http.post("/tasks", json=task)).status_code == 201
    claim = await http.post(
        "/leases/claim", json={"agent_id": "w", "agent_role": "coder", "lease_ttl_ms": 60_000}
    )
    lease = claim.json()
    assert claim.headers["content-type"] == "application/json"
    assert lease["task"]["metadata"] == metadata
    assert set(lease) == {
        "task",
        "run",
        "lease_id",
        "lease_token",
        "expires_at_ms",
        "previous_checkpoint",
    }
    token = lease["lease_token"]
    assert len(token) > 20 and "*" not in token  # in clear, as NullTickets answers it
    run = lease["run"]["id"]
    auth = {"Authorization": f"Bearer {token}"}
    moved = await http.post(f"/runs/{run}/transition", json={"trigger": "complete"}, headers=auth)
    assert moved.status_code == 200, moved.text
    assert moved.json() == {"previous_stage": "todo", "new_stage": "done", "trigger": "complete"}
