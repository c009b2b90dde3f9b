"""The client's plain operations come from the contract table, and it retries only when asked.

* every operation of the table that has a typed protocol method is sent by some part of the
  client (the others by ``Tracker.call``), and the client sends no operation the table lacks
  (read from the client's source: the operation names it passes);
* a client method cannot ask for another answer type than the table's;
* the default client tries a call once; ``retry=``, ``retry_attempts`` and the URL's
  ``?retry_attempts=`` ask for retries; ``open_tracker(retry=...)`` hands them to the client.
"""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest

from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tracker_client import nulltickets
from tracker_client.contract import table as contract
from tracker_client.errors import TrackerUnavailable, ValidationFailed
from tracker_client.factory import open_tracker
from tracker_client.models import ArtifactCreate, Pipeline, TaskCreate
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings
from tracker_client.nulltickets.options import NO_RETRY, OPERATOR_RETRY
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.timeout(30)

#: The HTTP client's package, whose modules send the operations (the table is elsewhere).
PACKAGE = Path(nulltickets.__file__).parent
#: Routes of the table the client never calls (documents served for tools, read by nobody).
NOT_CALLED = {"openapi", "openapi_well_known"}
FAST = RetrySettings(attempts=3, initial_s=0.001, max_wait_s=0.002)


def _sent_operations() -> set[str]:
    """Operation names passed to ``Wire.send/call/call_or_none`` and ``operation()`` in the
    client's modules."""
    names: set[str] = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called in ("send", "call", "call_or_none", "operation") and isinstance(
                first, ast.Constant
            ):
                names.add(str(first.value))
    return names


def test_the_client_sends_every_operation_of_the_table_and_no_other() -> None:
    table = {op.name for op in contract.OPERATIONS}
    sent = _sent_operations()
    assert sent - table == set()
    # Every operation with a typed method of the protocol is sent by that method; the others
    # (extension operations added as a row only) go through the generic Tracker.call.
    typed = {name for name in dir(Tracker) if not name.startswith("_")}
    assert (table & typed) - NOT_CALLED - sent == set()


def test_the_client_modules_spell_no_route() -> None:
    # Paths come from the table: no client module builds a request path of its own.
    for path in PACKAGE.glob("*.py"):
        if path.name in ("contract.py", "wire_models.py", "wire_errors.py"):
            continue
        text = path.read_text()
        assert 'f"/' not in text and "f'/" not in text, path.name


def _failing(fake: FakeNullTickets, status: int = 503) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok", "version": "x"})
        fake.requests.append(request)
        return httpx.Response(status, json={"error": {"code": "busy", "message": "busy"}})

    return httpx.MockTransport(handler)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("url", "options", "tries"),
    [
        ("http://127.0.0.1:7700", {}, 1),
        ("http://127.0.0.1:7700", {"retry": FAST}, 3),
        ("http://127.0.0.1:7700", {"retry": NO_RETRY, "retry_attempts": "2"}, 2),
        ("http://127.0.0.1:7700?retry_attempts=2&retry_initial_s=0.001", {}, 2),
        ("http://127.0.0.1:7700?retry_attempts=1", {"retry": FAST}, 1),
    ],
)
async def test_a_call_is_tried_once_unless_retries_are_asked_for(url, options, tries) -> None:
    fake = FakeNullTickets()
    tracker = RemoteTracker(url, transport=_failing(fake), **options)
    try:
        with pytest.raises(TrackerUnavailable):
            await tracker.get_task("t1")
    finally:
        await tracker.aclose()
    assert len(fake.requests) == tries


@pytest.mark.anyio
async def test_without_retries_a_transient_500_on_artifacts_reaches_the_caller() -> None:
    fake = FakeNullTickets()
    tracker = RemoteTracker("http://127.0.0.1:7700", transport=fake.transport())
    try:
        pid = await tracker.create_pipeline("p", PIPELINE)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        fake.unavailable = 1
        with pytest.raises(TrackerUnavailable):
            await tracker.add_artifact(ArtifactCreate(kind="f", uri="x", task_id=tid))
        posts = [r for r in fake.requests if r.url.path == "/artifacts" and r.method == "POST"]
        assert len(posts) == 1
    finally:
        await tracker.aclose()


@pytest.mark.anyio
async def test_open_tracker_hands_the_retry_settings_to_the_client() -> None:
    tracker = await open_tracker("http://127.0.0.1:7700?retry_budget_s=7", retry=OPERATOR_RETRY)
    try:
        assert isinstance(tracker, RemoteTracker)
        assert tracker.options.retry == RetrySettings(attempts=6, budget_s=7.0)
    finally:
        await tracker.aclose()
    plain = await open_tracker("http://127.0.0.1:7700")
    try:
        assert isinstance(plain, RemoteTracker)
        assert plain.options.retry == NO_RETRY
    finally:
        await plain.aclose()


@pytest.mark.anyio
async def test_the_answer_type_is_the_tables() -> None:
    fake = FakeNullTickets()
    tracker = RemoteTracker("http://127.0.0.1:7700", transport=fake.transport())
    try:
        with pytest.raises(TypeError, match="the contract answers"):
            await tracker._wire.call("list_pipelines", into=Pipeline)
        with pytest.raises(TypeError, match="unknown query"):
            await tracker._wire.send("list_tasks", query={"colour": "red"})
        with pytest.raises(TypeError, match="path parameters"):
            await tracker._wire.send("get_task")
        with pytest.raises(ValidationFailed, match=r"limit must be 1\.\.1000"):
            await tracker.store_search("q", limit=0)
    finally:
        await tracker.aclose()


@pytest.mark.anyio
async def test_unkeyed_writes_carry_no_idempotency_key() -> None:
    fake = FakeNullTickets()
    tracker = RemoteTracker("http://127.0.0.1:7700", transport=fake.transport())
    try:
        pid = await tracker.create_pipeline("p", PIPELINE)
        await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        await tracker.store_put("ns", "k", {"v": 1})
    finally:
        await tracker.aclose()
    keyed = {(r.method, r.url.path): "idempotency-key" in r.headers for r in fake.requests}
    assert keyed[("POST", "/pipelines")] and keyed[("POST", "/tasks")]
    assert not keyed[("PUT", "/store/ns/k")]
    assert not keyed[("GET", "/health")]


@pytest.mark.anyio
async def test_a_bad_limit_is_refused_before_any_request() -> None:
    seen: list[httpx.Request] = []
    tracker = RemoteTracker(
        "http://127.0.0.1:7700", transport=httpx.MockTransport(lambda r: seen.append(r) or None)
    )
    try:
        with pytest.raises(ValidationFailed) as info:
            await tracker.list_tasks(limit=1001)
    finally:
        await tracker.aclose()
    assert info.value.code == "invalid_limit" and "list_tasks" in str(info.value)
    assert seen == []
