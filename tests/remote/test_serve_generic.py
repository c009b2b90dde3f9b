"""The handler made from a contract row (``tracker_client.serve.generic``) answers as the
hand-written handlers do, on a real embedded tracker (a SQLite file in ``tmp_path``): what a new
extension operation gets without writing a handler."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from tests.remote.fake_nulltickets import PIPELINE
from tracker_client.embedded import EmbeddedTracker
from tracker_client.nulltickets import contract
from tracker_client.serve.app import create_app
from tracker_client.serve.generic import generic_handler
from tracker_client.serve.http import endpoint

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

#: Operations whose hand-written handler does what the row says, nothing more.
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
)


#: Figures that move with the clock between the two requests.
_MOVING = {"generated_at_ms", "oldest_claimable_age_ms"}


def _steady(response: httpx.Response) -> Any:
    def strip(doc: Any) -> Any:
        if isinstance(doc, dict):
            return {k: strip(v) for k, v in doc.items() if k not in _MOVING}
        if isinstance(doc, list):
            return [strip(v) for v in doc]
        return doc

    return strip(json.loads(response.content)) if response.content else None


@pytest.fixture
async def clients(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    served = create_app(tracker)
    generic = Starlette(
        routes=[
            Route(op.path, endpoint(op, generic_handler(op)), methods=[op.method])
            for op in map(contract.operation, PLAIN)
        ]
    )
    for name in ("tracker", "max_request_bytes", "boot_id", "closing"):
        setattr(generic.state, name, getattr(served.state, name))
    generic.state.generation = 0
    base = "http://127.0.0.1"
    try:
        async with (
            httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url=base) as a,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=generic), base_url=base) as b,
        ):
            yield a, b
    finally:
        await tracker.aclose()


async def test_generic_handlers_answer_as_the_hand_written_ones(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    served, generic = clients
    pid = (await served.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()["id"]
    tid = (await served.post("/tasks", json={"pipeline_id": pid, "title": "t"})).json()["id"]
    other = (await served.post("/tasks", json={"pipeline_id": pid, "title": "u"})).json()["id"]
    await served.post(f"/tasks/{tid}/dependencies", json={"depends_on_task_id": other})
    await served.post(f"/tasks/{tid}/assignments", json={"agent_id": "a"})
    await served.put("/store/ns/k", json={"value": {"x": 1}})

    async def same(method: str, path: str, **kw: object) -> httpx.Response:
        a = await served.request(method, path, **kw)  # type: ignore[arg-type]
        b = await generic.request(method, path, **kw)  # type: ignore[arg-type]
        assert (a.status_code, _steady(a)) == (b.status_code, _steady(b)), (method, path)
        return a

    await same("GET", "/pipelines")
    await same("GET", f"/pipelines/{pid}")
    await same("GET", "/pipelines/nope")
    await same("GET", f"/tasks/{tid}/dependencies")
    await same("GET", f"/tasks/{tid}/assignments")
    await same("GET", f"/tasks/{tid}/runs")
    await same("GET", "/tasks/nope/runs")
    await same("GET", "/store/ns")
    await same("GET", "/ops/queue?near_expiry_ms=5&stuck_ms=7")
    await same("GET", "/ops/queue?stuck_ms=x")
    # Writes: each side acts on its own task, and the answers match.
    a = await served.post(f"/tasks/{tid}/cancel", json={"reason": "r"})
    b = await generic.post(f"/tasks/{other}/cancel", json={"reason": "r"})
    assert a.status_code == b.status_code == 200
    assert {**a.json(), "task_id": ""} == {**b.json(), "task_id": ""}
    await same("POST", f"/tasks/{tid}/cancel", content=b"{nope")
    a = await served.post(f"/tasks/{tid}/requeue")
    b = await generic.post(f"/tasks/{other}/requeue")
    assert (a.status_code, a.json().keys()) == (b.status_code, b.json().keys())
    await same("POST", "/tasks/nope/requeue", json={"stage": "todo"})
    deleted = await same("DELETE", "/store/ns")
    assert deleted.status_code == 204
