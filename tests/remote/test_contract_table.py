"""The wire contract as data (``tracker_client.contract.table``) and its error table
(``wire_errors``): the table is consistent, paths quote and match per segment, and an error
answered by the served tracker is read back by the client as the class it was raised as."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tracker_client import errors as E
from tracker_client.contract import table as contract
from tracker_client.contract.wire_errors import error_for, response_for

pytestmark = pytest.mark.timeout(30)


def _extension_marks(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        found = {schema["x-extension"]} if "x-extension" in schema else set()
        for value in schema.values():
            found |= _extension_marks(value)
        return found
    if isinstance(schema, list):
        return set().union(*(_extension_marks(v) for v in schema)) if schema else set()
    return set()


def test_the_table_is_consistent() -> None:
    names = [op.name for op in contract.OPERATIONS]
    assert len(names) == len(set(names))
    pairs = [(op.method, op.path) for op in contract.OPERATIONS]
    assert len(pairs) == len(set(pairs))
    used: set[str] = set()
    for op in contract.OPERATIONS:
        assert op.path.startswith("/") and op.summary, op.name
        assert contract.operation(op.name) is op
        if op.extension is not None:
            used.add(op.extension)
        used |= set(op.features)
        if op.body is not None:
            used |= _extension_marks(op.body.model_json_schema())
        assert op.auth in ("public", "admin", "lease")
        assert not (op.auth == "public" and op.body is not None)
        assert op.method != "GET" or op.body is None, op.name
    # Every advertised extension is used by the table (or is the connection's), and the table
    # names no other.
    assert used | contract.CONNECTION_EXTENSIONS == set(contract.EXTENSIONS)
    # The lease class is NullTickets' (plus release, checkpoint, finish, withdraw); GET
    # /runs/{id}/events is admin here.
    lease = {op.name for op in contract.OPERATIONS if op.auth == "lease"}
    assert lease == {"heartbeat", "add_event", "transition", "fail", "release", "checkpoint"} | {
        "finish",
        "withdraw",
    }
    assert contract.operation("list_events").auth == "admin"


def test_paths_are_quoted_and_matched_per_segment() -> None:
    path = contract.format_path("store_get", namespace="team a", key="key/1")
    assert path == "/store/team%20a/key%2F1"
    found = contract.match("GET", path)
    assert found is not None
    op, params = found
    assert op.name == "store_get" and params == {"namespace": "team a", "key": "key/1"}
    assert contract.operation("add_event").format(run_id="r?1") == "/runs/r%3F1/events"
    # A literal route wins over the parametrised one it overlaps.
    assert contract.match("GET", "/store/search") == (contract.operation("store_search"), {})
    assert contract.match("POST", "/tasks/bulk") == (contract.operation("create_tasks"), {})
    assert contract.match("GET", "/tasks/bulk") == (
        contract.operation("get_task"),
        {"task_id": "bulk"},
    )
    assert contract.match("GET", "/store/a/b/c") is None
    assert contract.match("PATCH", "/tasks") is None
    assert contract.match("POST", "/runs//events") is None
    assert contract.match("GET", "/health/") is None
    assert contract.match("GET", "health") is None
    assert contract.match("GET", "/health") == (contract.operation("health"), {})
    with pytest.raises(KeyError):
        contract.format_path("add_event")
    with pytest.raises(TypeError):
        contract.format_path("add_event", run_id="r", other="x")


_SERVED: list[tuple[E.TrackerError, bool, type[E.TrackerError], str]] = [
    (E.LeaseLost("gone", code="invalid_token"), True, E.LeaseLost, "invalid_token"),
    (E.LeaseLost("gone", code="expired"), True, E.LeaseLost, "expired"),
    (E.LeaseLost("gone", code="revoked"), True, E.LeaseLost, "revoked"),
    (E.LeaseLost("gone"), True, E.LeaseLost, "lease_lost"),
    (E.InvalidTransition("no", allowed=["a"]), True, E.InvalidTransition, "invalid_transition"),
    (E.Conflict("c", code="task_version_mismatch"), True, E.Conflict, "task_version_mismatch"),
    (E.NotFound("n", code="task_not_found"), False, E.NotFound, "task_not_found"),
    (E.ValidationFailed("v"), False, E.ValidationFailed, "validation_failed"),
    (
        E.TrackerRejected("r", code="reserved_namespace"),
        False,
        E.ValidationFailed,
        "reserved_namespace",
    ),
    (
        E.BacklogFull("f", role="r", depth=3, cap=3, retry_after_s=1.5),
        False,
        E.BacklogFull,
        "backlog_full",
    ),
    (E.Unsupported("u"), False, E.Unsupported, "unsupported"),
    (E.TrackerUnavailable("busy", code="locked"), False, E.TrackerUnavailable, "locked"),
    (E.TrackerCorrupt("bad"), False, E.TrackerUnavailable, "internal_error"),
]


@pytest.mark.parametrize(("exc", "lease_route", "read_as", "code"), _SERVED)
def test_an_answered_error_reads_back(
    exc: E.TrackerError, lease_route: bool, read_as: type[E.TrackerError], code: str
) -> None:
    status, body, headers = response_for(exc)
    raw = json.dumps(body).encode()
    got = error_for(
        status, raw, {k.lower(): v for k, v in headers.items()}, "POST /x", lease_route=lease_route
    )
    assert type(got) is read_as and got.code == code
    if isinstance(exc, E.BacklogFull):
        assert isinstance(got, E.BacklogFull)
        assert (got.role, got.depth, got.cap, got.retry_after_s) == ("r", 3, 3, 2.0)
    if isinstance(exc, E.InvalidTransition):
        assert isinstance(got, E.InvalidTransition) and got.allowed == ["a"]


def test_answers_only_the_client_reads() -> None:
    refused = error_for(403, b'{"error":{"code":"forbidden","message":"no"}}', {}, "GET /tasks")
    assert isinstance(refused, E.TokenRefused) and refused.status == 403
    assert isinstance(error_for(413, b"", {}, "POST /tasks"), E.ValidationFailed)
    assert isinstance(error_for(502, b"", {}, "GET /tasks"), E.TrackerUnavailable)
    other = error_for(418, b"", {}, "GET /tasks")
    assert type(other) is E.TrackerRejected and other.code == "http_418"
    assert response_for(E.TrackerError("x"))[:2] == (
        500,
        {"error": {"code": "internal_error", "message": "x"}},
    )


def test_served_routes_auth_and_openapi_follow_the_table() -> None:
    from starlette.routing import Route

    from tracker_client.serve.app import create_app
    from tracker_client.serve.openapi import openapi_document

    app = create_app(object())  # type: ignore[arg-type]  # routes only; the tracker is not used
    served = {}
    for route in app.routes:
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":
                served[(method, route.path.replace(":path}", "}"))] = route.name
    assert served == {(op.method, op.path): op.name for op in contract.OPERATIONS}
    paths = openapi_document()["paths"]
    for op in contract.OPERATIONS:
        doc = paths[op.path][op.method.lower()]
        assert (doc["operationId"], doc["x-auth"], doc.get("x-extension")) == (
            op.name,
            op.auth,
            op.extension,
        )
        assert str(op.status) in doc["responses"]
        in_path = [p["name"] for p in doc.get("parameters", []) if p["in"] == "path"]
        assert in_path == list(op.params), op.name
    # The waking writes (what NullTickets clients' long polls wake on) are exactly these.
    assert {op.name for op in contract.OPERATIONS if op.wakes} == {
        "create_task",
        "create_tasks",
        "transition",
        "fail",
        "finish",
        "finish_many",
        "unassign",
        "cancel",
        "cancel_all",
        "requeue",
        "requeue_all",
        "maintenance",
        "transition_task",
        "apply_pipeline",  # moves waiting tasks between stages and roles
    }


@pytest.mark.anyio
async def test_auth_classes_come_from_the_table() -> None:
    import httpx

    from tracker_client.serve.app import create_app

    app = create_app(object(), api_token="admin")  # type: ignore[arg-type]  # auth only
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        for op in contract.OPERATIONS:
            if op.auth == "public":
                continue
            path = op.format(**{p: "x" for p in op.params})
            response = await http.request(op.method, path)
            message = response.json()["error"]["message"]
            assert response.status_code == 401, op.name
            if op.auth == "lease":
                assert message == "Missing Authorization header", op.name
            else:
                assert message == "Missing or invalid Authorization header", op.name
        health = await http.get("/health", headers={"Authorization": "Bearer admin"})
        assert health.status_code == 500  # past auth: the (absent) tracker was asked
