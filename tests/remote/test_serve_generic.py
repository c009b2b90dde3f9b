"""Operations served from their contract row alone (``tracker_client.serve.generic``) answer
what the tracker says, on a real embedded tracker (a SQLite file in ``tmp_path``): what a new
extension operation gets without writing a handler. (The first ten had hand-written handlers
until a test showed both answered byte for byte alike; the lease writes' behaviour is the
contract suite's and test_server_lease_first's.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.remote.fake_nulltickets import PIPELINE
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

#: Operations served from their contract row alone (no hand-written handler).
PLAIN = (
    "list_pipelines",
    "get_pipeline",
    "list_dependencies",
    "list_assignments",
    "list_runs",
    "cancel",
    "requeue",
    "store_list",
    "store_delete_namespace",
    "queue_stats",
    # lease writes of a run (lease checked first: test_server_lease_first) and a create
    "add_event",
    "transition",
    "fail",
    "release",
    "create_pipeline",
)

#: Figures that move with the clock between two reads.
_MOVING = {"generated_at_ms", "oldest_claimable_age_ms"}


def _steady(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _steady(v) for k, v in doc.items() if k not in _MOVING}
    if isinstance(doc, list):
        return [_steady(v) for v in doc]
    return doc


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return _steady(value.model_dump(mode="json"))


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedTracker, httpx.AsyncClient]]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    app = create_app(tracker)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            yield tracker, http
    finally:
        await tracker.aclose()


def test_plain_operations_have_no_hand_written_handler() -> None:
    from tracker_client.serve import extra_routes, routes

    assert not set(PLAIN) & (set(routes.HANDLERS) | set(extra_routes.HANDLERS))


async def test_rows_alone_answer_what_the_tracker_says(
    served: tuple[EmbeddedTracker, httpx.AsyncClient],
) -> None:
    tracker, http = served
    pid = (await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()["id"]
    tid = (await http.post("/tasks", json={"pipeline_id": pid, "title": "t"})).json()["id"]
    other = (await http.post("/tasks", json={"pipeline_id": pid, "title": "u"})).json()["id"]
    await http.post(f"/tasks/{tid}/dependencies", json={"depends_on_task_id": other})
    await http.post(f"/tasks/{tid}/assignments", json={"agent_id": "a"})
    await http.put("/store/ns/k", json={"value": {"x": 1}})

    async def get(path: str, expected: Any) -> None:
        response = await http.get(path)
        assert response.status_code == 200, path
        assert _steady(response.json()) == _dump(expected), path

    await get("/pipelines", await tracker.list_pipelines())
    await get(f"/pipelines/{pid}", await tracker.get_pipeline(pid))
    await get(f"/tasks/{tid}/dependencies", await tracker.list_dependencies(tid))
    await get(f"/tasks/{tid}/assignments", await tracker.list_assignments(tid))
    await get(f"/tasks/{tid}/runs", await tracker.list_runs(tid))
    await get("/store/ns", await tracker.store_list("ns"))
    await get("/ops/queue", await tracker.queue_stats())
    await get(
        "/ops/queue?near_expiry_ms=5&stuck_ms=7",
        await tracker.queue_stats(near_expiry_ms=5, stuck_ms=7),
    )
    # Errors: the tracker's (404), the query's and the body's (400), as hand-written ones answer.
    missing = await http.get("/pipelines/nope")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    bad_query = await http.get("/ops/queue?stuck_ms=x")
    assert (bad_query.status_code, bad_query.json()["error"]["code"]) == (400, "invalid_request")
    json_type = {"Content-Type": "application/json"}
    bad_body = await http.post(f"/tasks/{tid}/cancel", content=b"{nope", headers=json_type)
    assert (bad_body.status_code, bad_body.json()["error"]["code"]) == (400, "invalid_json")
    untyped = await http.post(f"/tasks/{tid}/cancel", content=b"{}")  # a form could send it
    assert (untyped.status_code, untyped.json()["error"]["code"]) == (415, "unsupported_media_type")
    # Writes, with a body, with an empty one, and with none at all (204).
    cancelled = await http.post(f"/tasks/{tid}/cancel", json={"reason": "r"})
    assert cancelled.status_code == 200 and cancelled.json()["task_id"] == tid
    requeued = await http.post(f"/tasks/{tid}/requeue")
    assert requeued.status_code == 200, requeued.text
    assert (await http.post("/tasks/nope/requeue", json={"stage": "todo"})).status_code == 404
    deleted = await http.delete("/store/ns")
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert await tracker.store_list("ns") == []
