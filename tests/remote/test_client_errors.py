"""How the client maps every kind of tracker answer to the exception tree, and bad answers.

Status first, then ``error.code``; malformed success answers get a clear error naming what is
wrong; a server that never answers is a timeout, not a hang; tokens never reach logs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import anyio
import httpx
import pytest

from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tracker_client.contract.wire_errors import error_for, parse_error_body
from tracker_client.errors import (
    BacklogFull,
    Conflict,
    InvalidTransition,
    LeaseLost,
    NotFound,
    TokenRefused,
    TrackerError,
    TrackerRejected,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings

NO_RETRY = RetrySettings(attempts=1)
FAST = RetrySettings(attempts=3, initial_s=0.001, max_wait_s=0.002)


def _body(code: str, message: str = "m", **extra: object) -> bytes:
    import json

    return json.dumps({"error": {"code": code, "message": message, **extra}}).encode()


@pytest.mark.parametrize(
    ("status", "body", "lease_route", "kind", "code"),
    [
        (410, _body("expired"), True, LeaseLost, "expired"),
        (410, _body("revoked"), True, LeaseLost, "revoked"),
        (404, _body("not_found"), True, LeaseLost, "not_found"),
        (401, _body("unauthorized", "Invalid token"), True, LeaseLost, "invalid_token"),
        (404, _body("task_not_found"), False, NotFound, "task_not_found"),
        (409, _body("task_version_mismatch"), False, Conflict, "task_version_mismatch"),
        (409, _body("expected_stage_mismatch"), True, Conflict, "expected_stage_mismatch"),
        (400, _body("invalid_transition"), True, InvalidTransition, "invalid_transition"),
        (400, _body("invalid_cursor"), False, ValidationFailed, "invalid_cursor"),
        (401, _body("unauthorized"), False, TokenRefused, "unauthorized"),
        (403, b"", False, TokenRefused, "unauthorized"),
        (413, b"", False, ValidationFailed, "request_too_large"),
        (422, _body("weird"), False, TrackerRejected, "weird"),
        (429, _body("backlog_full", role="r", depth=3, cap=3), False, BacklogFull, "backlog_full"),
        (500, _body("internal_error"), False, TrackerUnavailable, "internal_error"),
        (502, b"<html>bad gateway</html>", False, TrackerUnavailable, "server_error"),
        (501, _body("unsupported"), False, Unsupported, "unsupported"),
    ],
)
def test_status_then_code_mapping(status, body, lease_route, kind, code) -> None:
    exc = error_for(status, body, {}, what="POST /x", lease_route=lease_route)
    assert type(exc) is kind
    assert exc.code == code


def test_backlog_full_carries_role_depth_cap_and_retry_after() -> None:
    body = _body(
        "backlog_full", "backlog of role 'r' is full: 3 waiting, cap 3", role="r", depth=3, cap=3
    )
    exc = error_for(429, body, {"retry-after": "7"}, what="POST /tasks", lease_route=False)
    assert isinstance(exc, BacklogFull)
    assert (exc.role, exc.depth, exc.cap, exc.retry_after_s) == ("r", 3, 3, 7.0)
    assert str(exc) == "backlog of role 'r' is full: 3 waiting, cap 3"


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (
            b'{"error":{"code":"reserved_namespace","message":""search" is a reserved namespace '
            b'name"}}',
            "reserved_namespace",
            '"search" is a reserved namespace name',
        ),
        (
            b'{"error":{"code":"invalid_json","message":"Invalid JSON body; expected {"value": '
            b'...}"}}',
            "invalid_json",
            'Invalid JSON body; expected {"value": ...}',
        ),
        (b"", None, "(empty body)"),
        (b"[1, 2]", None, "[1, 2]"),
        (b'{"error": "flat"}', None, '{"error": "flat"}'),
    ],
)
def test_error_bodies_are_parsed_defensively(body, code, message) -> None:
    got_code, got_message, _ = parse_error_body(body)
    assert (got_code, got_message) == (code, message)


async def _call_with(answer: Callable[[httpx.Request], httpx.Response], call) -> TrackerError:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok", "version": "x"})
        return answer(request)

    tracker = RemoteTracker(
        "http://127.0.0.1:1", retry=NO_RETRY, transport=httpx.MockTransport(handler)
    )
    try:
        with pytest.raises(TrackerError) as info:
            await call(tracker)
    finally:
        await tracker.aclose()
    return info.value


@pytest.mark.anyio
async def test_a_success_answer_that_is_not_json_is_unavailable() -> None:
    exc = await _call_with(
        lambda r: httpx.Response(200, content=b"<html>"), lambda t: t.get_task("x")
    )
    assert isinstance(exc, TrackerUnavailable) and exc.code == "invalid_response"
    assert "not JSON" in str(exc)


@pytest.mark.anyio
async def test_a_success_answer_of_the_wrong_shape_names_the_field() -> None:
    exc = await _call_with(
        lambda r: httpx.Response(200, json={"id": "t", "stage": 5}), lambda t: t.get_task("x")
    )
    assert isinstance(exc, TrackerRejected) and exc.code == "invalid_response"
    assert "pipeline_id" in str(exc) or "stage" in str(exc)


@pytest.mark.anyio
async def test_a_created_answer_without_id_is_named() -> None:
    exc = await _call_with(
        lambda r: httpx.Response(201, json={"ok": True}), lambda t: t.create_pipeline("p", PIPELINE)
    )
    assert exc.code == "invalid_response" and "'id'" in str(exc)


@pytest.mark.anyio
async def test_a_server_that_never_answers_times_out() -> None:
    accepted = anyio.Event()

    async def silent(stream) -> None:
        accepted.set()
        async with stream:
            await anyio.sleep(30)  # reads nothing, answers nothing (like a stuck server)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, silent)
        tracker = RemoteTracker(f"http://127.0.0.1:{port}", timeout_s=0.2, retry=NO_RETRY)
        try:
            with anyio.fail_after(10), pytest.raises(TrackerUnavailable) as info:
                await tracker.health()
        finally:
            await tracker.aclose()
        tg.cancel_scope.cancel()
    await listener.aclose()
    assert accepted.is_set()
    assert info.value.code == "timeout"


@pytest.mark.anyio
async def test_tokens_never_reach_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    admin = "admin-token-never-logged"
    fake = FakeNullTickets(api_token=admin)
    caplog.set_level(logging.DEBUG)
    tracker = RemoteTracker(
        "http://127.0.0.1:1", api_token=admin, retry=FAST, transport=fake.transport()
    )
    try:
        pid = await tracker.create_pipeline("p", PIPELINE)
        await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        lease = await tracker.claim("w", "coder", 3_600_000)
        assert lease is not None
        fake.unavailable = 1  # a retry is logged
        await tracker.add_event(lease, "big", {"x": "y" * 100_000})  # a trim is logged
        await tracker.heartbeat(lease)
        await tracker.fail(lease, "boom")
    finally:
        await tracker.aclose()
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "retrying" in text and "trimmed" in text
    assert admin not in text
    assert lease.lease_token.get_secret_value() not in text
    assert lease.lease_token.get_secret_value() not in repr(lease)


@pytest.mark.anyio
async def test_an_answer_only_the_standard_json_parser_reads_is_read_as_before() -> None:
    """pydantic's JSON parser refuses a lone surrogate's escape that ``json.loads`` reads: such
    an answer is read as the standard library reads it, not called "not JSON"."""
    fake = FakeNullTickets()

    def handler(request: httpx.Request) -> httpx.Response:
        answer = fake.handle(request)
        if request.method == "GET" and request.url.path.startswith("/tasks/"):
            doc = {**json.loads(answer.read()), "title": "\ud800"}
            raw = json.dumps(doc).encode()  # ascii: the lone surrogate as its escape
            assert b'"\\ud800"' in raw
            return httpx.Response(answer.status_code, content=raw)
        return answer

    tracker = RemoteTracker(
        "http://127.0.0.1:1", retry=NO_RETRY, transport=httpx.MockTransport(handler)
    )
    try:
        pid = await tracker.create_pipeline("p", PIPELINE)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        task = await tracker.get_task(tid)
    finally:
        await tracker.aclose()
    assert task.title == "\ud800"
