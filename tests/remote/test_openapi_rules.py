"""The OpenAPI document ``tracker serve`` serves states the server's real rules, and the server
keeps them: a value at either end of a stated range is accepted, one step past it is a 400.

A schema-based fuzz run once had 26 schema-valid requests refused (``limit`` 1..1000,
non-empty strings, TTL >= 1 and the ranges were not in the document). The document is read
over real HTTP on 127.0.0.1 from a served embedded rail, and every range it states for a task's
fields and for the query parameters of the read routes is tried at both ends. TRACE is 405.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.remote.fixtures import serve_on_port
from tracker_client.bounds import MAX_DURATION_MS, MAX_EPOCH_MS, MAX_LIMIT
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
#: Fields whose stated maximum the server refuses for a reason the schema cannot say: the
#: latest ``run_at_ms`` is ten years from now (the schema states the last date a reader shows).
_TIME_BOUND = {"run_at_ms"}


class Served:
    def __init__(self, http: httpx.AsyncClient, pipeline: str, doc: dict[str, Any]) -> None:
        self.http = http
        self.pipeline = pipeline
        self.doc = doc

    def schema(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.doc["components"]["schemas"][name]
        return found


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        async with (
            serve_on_port(create_app(tracker)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            pid = (await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})).json()
            doc = (await http.get("/openapi.json")).json()
            yield Served(http, pid["id"], doc)
    finally:
        await tracker.aclose()


def _range(prop: dict[str, Any]) -> tuple[int | None, int | None]:
    """(minimum, maximum) of an integer property, ``anyOf`` with null included."""
    for branch in [prop, *prop.get("anyOf", [])]:
        if branch.get("type") == "integer" and ("minimum" in branch or "maximum" in branch):
            return branch.get("minimum"), branch.get("maximum")
    return None, None


def _query_params(doc: dict[str, Any], method: str, path: str) -> dict[str, dict[str, Any]]:
    params = doc["paths"][path][method].get("parameters", [])
    return {p["name"]: p["schema"] for p in params if p["in"] == "query"}


async def test_the_document_states_the_key_rules(served: Served) -> None:
    doc = served.doc
    assert _query_params(doc, "get", "/tasks")["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_LIMIT,
    }
    search = _query_params(doc, "get", "/store/search")
    assert (search["q"]["minLength"], search["limit"]["maximum"]) == (1, MAX_LIMIT)
    assert _query_params(doc, "get", "/tasks/{task_id}/wait")["timeout_ms"]["maximum"] == 60_000
    claim = served.schema("ClaimBody")["properties"]
    assert (claim["agent_id"]["minLength"], claim["agent_role"]["minLength"]) == (1, 1)
    assert (claim["lease_ttl_ms"]["minimum"], claim["lease_ttl_ms"]["maximum"]) == (1, 86_400_000)
    task = served.schema("TaskCreate")["properties"]
    assert _range(task["queue_ttl_ms"]) == (1, MAX_DURATION_MS)
    assert _range(task["expires_at_ms"]) == (0, MAX_EPOCH_MS)
    assert _range(task["priority"]) == (-(2**63), 2**63 - 1)
    assert task["title"]["maxLength"] == 4096
    retry = served.schema("RetryPolicy")["properties"]
    assert _range(retry["retry_delay_ms"]) == (0, MAX_DURATION_MS)
    assert served.schema("EventBody")["properties"]["kind"]["minLength"] == 1


async def _create(served: Served, field: str, value: int) -> httpx.Response:
    body: dict[str, Any] = {"pipeline_id": served.pipeline, "title": "t"}
    if field.startswith("retry_policy."):
        body["retry_policy"] = {field.split(".", 1)[1]: value}
    else:
        body[field] = value
    if field == "dedupe_window_ms":
        body["dedupe_key"] = f"key-{value}"
    return await served.http.post("/tasks", json=body)


async def test_every_stated_range_of_a_task_is_the_one_the_server_keeps(served: Served) -> None:
    ranged: list[tuple[str, int | None, int | None]] = []
    for model, prefix in (("TaskCreate", ""), ("RetryPolicy", "retry_policy.")):
        for name, prop in served.schema(model)["properties"].items():
            low, high = _range(prop)
            if low is not None or high is not None:
                ranged.append((prefix + name, low, high))
    assert len(ranged) == 10  # every integer field of a task and of its retry policy
    wrong: list[str] = []
    for field, low, high in ranged:
        valid = [
            v for v in (low, high) if v is not None and not (v == high and field in _TIME_BOUND)
        ]
        invalid = [
            v for v in (None if low is None else low - 1, None if high is None else high + 1)
        ]
        for value in valid:
            answer = await _create(served, field, value)
            if answer.status_code != 201:
                wrong.append(f"{field}={value} (in range): {answer.status_code} {answer.text}")
        for bad in invalid:
            if bad is None:
                continue
            answer = await _create(served, field, bad)
            if answer.status_code != 400 or field.split(".")[-1] not in answer.text:
                wrong.append(f"{field}={bad} (out of range): {answer.status_code} {answer.text}")
    assert wrong == []


async def test_every_stated_query_range_is_the_one_the_server_keeps(served: Served) -> None:
    http = served.http
    task = (await http.post("/tasks", json={"pipeline_id": served.pipeline, "title": "t"})).json()
    await http.post(f"/tasks/{task['id']}/cancel", json={})  # finished: long polls answer at once
    fill = {"{task_id}": task["id"]}
    checked = 0
    wrong: list[str] = []
    for path, methods in served.doc["paths"].items():
        if "get" not in methods or any(p in path for p in ("{run_id}", "{key}", "{name}")):
            continue
        url = path
        for param, value in fill.items():
            url = url.replace(param, value)
        if "{" in url:
            continue
        for name, schema in _query_params(served.doc, "get", path).items():
            if schema.get("type") != "integer" or "minimum" not in schema:
                continue
            extra = {"q": "t"} if path == "/store/search" else {}
            if path == "/ops/wait-for-work":
                extra["since"] = "another-boot:0"  # answered at once: no 60 s wait
            low, high = schema["minimum"], schema["maximum"]
            for value, ok in ((low, True), (high, True), (low - 1, False), (high + 1, False)):
                answer = await http.get(url, params={**extra, name: str(value)})
                if (answer.status_code == 200) != ok or (not ok and answer.status_code != 400):
                    wrong.append(f"GET {path}?{name}={value}: {answer.status_code} {answer.text}")
            checked += 1
    assert checked >= 6
    assert wrong == []


async def test_trace_is_405_on_every_path(served: Served) -> None:
    http = served.http
    known = await http.request("TRACE", "/tasks", headers={"Authorization": "Bearer secret"})
    assert known.status_code == 405
    assert known.headers["allow"] == "GET, HEAD, POST"
    assert known.json()["error"]["code"] == "method_not_allowed"
    assert "secret" not in known.text  # nothing of the request is echoed
    assert (await http.request("TRACE", "/nowhere")).status_code == 405
    assert (await http.delete("/tasks")).status_code == 404  # another method: as on NullTickets
