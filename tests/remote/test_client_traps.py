"""The client against the real server's traps (docs/guarantees/nulltickets.md), faked.

The served tracker fixes these traps, so MockTransport is the only way to show the client
absorbs them: request-size drops, invalid JSON error bodies, the cursor skip, stale cached 204s,
the 300 s heartbeat reset, 500 on unknown artifact ids, 401s and the two-token model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import SecretStr

from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tracker_client.errors import (
    LeaseLost,
    NotFound,
    TrackerRejected,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)
from tracker_client.models import ArtifactCreate, TaskCreate
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings

FAST = RetrySettings(attempts=4, initial_s=0.001, max_wait_s=0.005, budget_s=5.0)
ADMIN = "admin-secret-token"


@pytest.fixture
def fake() -> FakeNullTickets:
    return FakeNullTickets(api_token=ADMIN)


@pytest.fixture
async def remote(fake: FakeNullTickets) -> AsyncIterator[RemoteTracker]:
    tracker = RemoteTracker(
        "http://127.0.0.1:7700", api_token=ADMIN, retry=FAST, transport=fake.transport()
    )
    try:
        yield tracker
    finally:
        await tracker.aclose()


async def _pipeline(remote: RemoteTracker) -> str:
    return await remote.create_pipeline("p", PIPELINE)


def _sizes(fake: FakeNullTickets, path: str) -> list[int]:
    return [len(r.content) for r in fake.requests if r.url.path == path]


# -- request size ---------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_bulk_create_is_split_under_the_size_limit(remote, fake) -> None:
    pid = await _pipeline(remote)
    tasks = [TaskCreate(pipeline_id=pid, title=f"t{i}", description="x" * 80) for i in range(2000)]
    ids = await remote.create_tasks(tasks)
    assert len(ids) == 2000 and len(set(ids)) == 2000
    sizes = _sizes(fake, "/tasks/bulk")
    assert len(sizes) > 1 and max(sizes) <= 60_000
    # Ids come back in input order: the fake's creation order matches the titles.
    titles = [fake.tasks[i]["title"] for i in ids]
    assert titles == [f"t{i}" for i in range(2000)]
    keys = [r.headers["idempotency-key"] for r in fake.requests if r.url.path == "/tasks/bulk"]
    assert len(set(keys)) == len(keys)


@pytest.mark.anyio
async def test_split_bulk_failure_reports_created_ids_and_resumes_with_same_key(
    remote, fake
) -> None:
    pid = await _pipeline(remote)
    tasks = [TaskCreate(pipeline_id=pid, title=f"t{i}", description="y" * 200) for i in range(600)]
    fake.resets = 0
    calls = {"n": 0}
    original = fake.route

    def flaky(method, seg, query, body, auth):
        if seg == ["tasks", "bulk"]:
            calls["n"] += 1
            if calls["n"] == 2:
                return httpx.Response(
                    404,
                    json={"error": {"code": "pipeline_not_found", "message": "Pipeline not found"}},
                )
        return original(method, seg, query, body, auth)

    fake.route = flaky  # type: ignore[method-assign]
    with pytest.raises(NotFound) as info:
        await remote.create_tasks(tasks, idempotency_key="batch-1")
    created = info.value.created_ids  # type: ignore[attr-defined]
    assert created and len(created) < 600
    assert any("idempotency_key" in note for note in info.value.__notes__)
    fake.route = original  # type: ignore[method-assign]
    fake.idem.clear()  # the real server cached the 404 too; a fresh store models a new key space
    ids = await remote.create_tasks(tasks, idempotency_key="batch-2")
    assert len(ids) == 600


@pytest.mark.anyio
async def test_oversized_event_data_is_trimmed_with_a_marker(remote, fake) -> None:
    pid = await _pipeline(remote)
    await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    lease = await remote.claim("w", "coder", 60_000)
    assert lease is not None
    event_id = await remote.add_event(lease, "log", {"stdout": "z" * 200_000, "rc": 0})
    stored = fake.events[event_id - 1]["data"]
    assert stored["rc"] == 0
    assert stored["_truncated"]["original_bytes"] > 200_000
    assert "[truncated" in stored["stdout"]
    assert max(_sizes(fake, f"/runs/{lease.run.id}/events")) <= 60_000


@pytest.mark.anyio
async def test_other_oversized_requests_are_refused_before_sending(remote, fake) -> None:
    pid = await _pipeline(remote)
    sent = len(fake.requests)
    with pytest.raises(ValidationFailed) as info:
        await remote.create_task(TaskCreate(pipeline_id=pid, title="big", description="d" * 70_000))
    assert info.value.code == "request_too_large"
    assert "64 KiB" in str(info.value)
    assert len(fake.requests) == sent


@pytest.mark.anyio
async def test_a_dropped_connection_is_unavailable_after_the_retry_budget(remote, fake) -> None:
    await remote.health()
    fake.resets = 10
    with pytest.raises(TrackerUnavailable) as info:
        await remote.get_task("00000000-0000-4000-8000-000000000000")
    assert info.value.code == "connection_error"
    assert len([r for r in fake.requests if r.url.path.startswith("/tasks/")]) == FAST.attempts


@pytest.mark.anyio
async def test_retries_resend_identical_bytes_and_key(remote, fake) -> None:
    await remote.health()
    fake.unavailable = 2
    pid = await remote.create_pipeline("p", PIPELINE)
    posts = [r for r in fake.requests if r.url.path == "/pipelines"]
    assert len(posts) == 3
    assert len({r.headers["idempotency-key"] for r in posts}) == 1
    assert len({r.content for r in posts}) == 1
    assert pid in fake.pipelines


# -- error bodies ---------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_invalid_json_error_bodies_are_read(remote) -> None:
    with pytest.raises(ValidationFailed) as info:
        await remote.store_put("search", "k", 1)
    assert info.value.code == "reserved_namespace"
    assert "reserved namespace" in str(info.value)


@pytest.mark.anyio
async def test_non_json_error_body_keeps_status_and_excerpt() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok", "version": "x"})
        return httpx.Response(418, content=b"<html>teapot</html>")

    async with _client(handler) as remote:
        with pytest.raises(TrackerRejected) as info:
            await remote.list_pipelines()
    assert info.value.code == "http_418"
    assert "teapot" in str(info.value)


# -- cursors --------------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_following_cursors_skips_nothing(remote, fake) -> None:
    pid = await _pipeline(remote)
    for i in range(7):
        await remote.create_task(TaskCreate(pipeline_id=pid, title=f"t{i}"))
    seen, cursor = [], None
    while True:
        page = await remote.list_tasks(limit=2, cursor=cursor)
        seen += [t.title for t in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [f"t{i}" for i in range(7)]
    # The cursor travelled with its ':' as-is (the server does not percent-decode queries).
    assert all(b"%3A" not in r.url.raw_path for r in fake.requests)


@pytest.mark.anyio
async def test_event_and_artifact_cursors_skip_nothing(remote, fake) -> None:
    pid = await _pipeline(remote)
    tid = await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    lease = await remote.claim("w", "coder", 60_000)
    assert lease is not None
    for i in range(5):
        await remote.add_event(lease, "step", {"i": i})
        await remote.add_artifact(ArtifactCreate(kind="file", uri=f"file:///{i}", task_id=tid))
    events, cursor = [], None
    while True:
        page = await remote.list_events(lease.run.id, limit=2, cursor=cursor)
        events += [e.data["i"] for e in page.items]
        if (cursor := page.next_cursor) is None:
            break
    assert events == [0, 1, 2, 3, 4]
    uris, cursor = [], None
    while True:
        apage = await remote.list_artifacts(task_id=tid, limit=2, cursor=cursor)
        uris += [a.uri for a in apage.items]
        if (cursor := apage.next_cursor) is None:
            break
    assert uris == [f"file:///{i}" for i in range(5)]


# -- idempotency ----------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_no_stale_204_replay_on_claim(remote, fake) -> None:
    pid = await _pipeline(remote)
    assert await remote.claim("w", "coder", 60_000) is None
    await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    lease = await remote.claim("w", "coder", 60_000)
    assert lease is not None
    keys = [r.headers["idempotency-key"] for r in fake.requests if r.url.path == "/leases/claim"]
    assert len(keys) == 2 and keys[0] != keys[1]


@pytest.mark.anyio
async def test_claim_retry_after_reset_reuses_its_key_and_gets_the_same_lease(remote, fake) -> None:
    pid = await _pipeline(remote)
    await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    fake.lose_answers["/leases/claim"] = 1  # the server commits the lease, the answer is lost
    lease = await remote.claim("w", "coder", 60_000)
    assert lease is not None
    claims = [r for r in fake.requests if r.url.path == "/leases/claim"]
    assert len(claims) == 2 and len({r.headers["idempotency-key"] for r in claims}) == 1
    assert len(fake.leases) == 1 and lease.lease_id in fake.leases


@pytest.mark.anyio
async def test_heartbeat_sends_no_idempotency_key_and_reports_the_300s_reset(
    remote, fake, caplog
) -> None:
    pid = await _pipeline(remote)
    await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    assert remote.max_lease_ttl_ms == 300_000
    caplog.set_level(logging.WARNING, "backlog_worker.tracker.remote")
    lease = await remote.claim("w", "coder", 3_600_000)
    assert lease is not None
    claim_body = json.loads(next(r for r in fake.requests if r.url.path == "/leases/claim").content)
    assert claim_body["lease_ttl_ms"] == 300_000  # clamped: a longer lease is cut on heartbeat
    expires = await remote.heartbeat(lease)
    assert expires == fake.leases[lease.lease_id]["expires_at_ms"]
    beats = [r for r in fake.requests if r.url.path.endswith("/heartbeat")]
    assert beats and all("idempotency-key" not in r.headers for r in beats)
    assert any("300 s" in rec.getMessage() for rec in caplog.records)


# -- artifacts ------------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_500_on_unknown_artifact_ids_is_not_found_without_retries(remote, fake) -> None:
    await remote.health()
    with pytest.raises(NotFound) as info:
        await remote.add_artifact(
            ArtifactCreate(kind="f", uri="x", task_id="11111111-1111-4111-8111-111111111111")
        )
    assert info.value.code == "task_not_found"
    assert len([r for r in fake.requests if r.url.path == "/artifacts"]) == 1
    pid = await _pipeline(remote)
    tid = await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    with pytest.raises(NotFound) as info:
        await remote.add_artifact(ArtifactCreate(kind="f", uri="x", task_id=tid, run_id="nope"))
    assert info.value.code == "run_not_found"


@pytest.mark.anyio
async def test_a_transient_500_on_artifacts_with_known_ids_is_retried(remote, fake) -> None:
    pid = await _pipeline(remote)
    tid = await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    fake.unavailable = 1
    art = await remote.add_artifact(ArtifactCreate(kind="f", uri="x", task_id=tid))
    assert any(a["id"] == art for a in fake.artifacts)


# -- auth -----------------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_lease_token_replaces_the_admin_token_on_lease_routes(remote, fake) -> None:
    pid = await _pipeline(remote)
    await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    lease = await remote.claim("w", "coder", 60_000)
    assert lease is not None
    token = lease.lease_token.get_secret_value()
    await remote.heartbeat(lease)
    await remote.add_event(lease, "note", {"a": 1})
    await remote.list_events(lease.run.id)
    result = await remote.fail(lease, "boom")
    assert result.retry_scheduled is True and result.dead_lettered is False
    for request in fake.requests:
        auths = request.headers.get_list("authorization")
        path = request.url.path
        if path == "/health":
            assert auths == []
        elif (path.startswith("/leases/") and path != "/leases/claim") or (
            path.startswith("/runs/") and request.method == "POST"
        ):
            assert auths == [f"Bearer {token}"], path
        else:
            assert auths == [f"Bearer {ADMIN}"], path


@pytest.mark.anyio
async def test_401_on_admin_routes_is_rejected_without_leaking_the_token(fake) -> None:
    tracker = RemoteTracker(
        "http://127.0.0.1:7700", api_token="wrong-token", retry=FAST, transport=fake.transport()
    )
    try:
        with pytest.raises(TrackerRejected) as info:
            await tracker.list_pipelines()
    finally:
        await tracker.aclose()
    assert info.value.code == "unauthorized"
    assert "api_token" in str(info.value) and "wrong-token" not in str(info.value)
    assert "wrong-token" not in repr(tracker)


@pytest.mark.anyio
async def test_lease_route_errors_are_lease_lost_with_codes(remote, fake) -> None:
    pid = await _pipeline(remote)
    await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    lease = await remote.claim("w", "coder", 60_000)
    assert lease is not None
    fake.leases[lease.lease_id]["expires_at_ms"] = 0
    with pytest.raises(LeaseLost) as info:
        await remote.heartbeat(lease)
    assert info.value.code == "expired"
    forged = lease.model_copy(update={"lease_token": SecretStr("0" * 64)})
    fake.leases[lease.lease_id]["expires_at_ms"] = 2**60
    with pytest.raises(LeaseLost) as info:
        await remote.add_event(forged, "x")
    assert info.value.code == "invalid_token"
    del fake.leases[lease.lease_id]
    with pytest.raises(LeaseLost) as info:
        await remote.transition(lease, "complete")
    assert info.value.code == "not_found"


# -- dead letters and unsupported operations ------------------------------------------------------
@pytest.mark.anyio
async def test_dead_letter_is_read_back_after_fail(remote, fake) -> None:
    pid = await _pipeline(remote)
    await remote.create_task(
        TaskCreate(pipeline_id=pid, title="t", retry_policy={"max_attempts": 1})
    )
    lease = await remote.claim("w", "coder", 60_000)
    assert lease is not None
    result = await remote.fail(lease, "boom")
    assert result.dead_lettered is True and result.retry_scheduled is False
    assert result.dead_letter_reason == "max_attempts_exceeded"


@pytest.mark.anyio
async def test_backlog_operations_are_unsupported_on_nulltickets(remote) -> None:
    for name, call in [
        ("cancel", lambda: remote.cancel("t")),
        ("cancel_all", lambda: remote.cancel_all(role="coder")),
        ("requeue", lambda: remote.requeue("t")),
        ("maintenance", lambda: remote.maintenance()),
        ("list_task_events", lambda: remote.list_task_events("t")),
    ]:
        with pytest.raises(Unsupported) as info:
            await call()
        assert str(info.value).startswith(name)
    pid = await _pipeline(remote)
    with pytest.raises(Unsupported, match="concurrency_key"):
        await remote.create_task(TaskCreate(pipeline_id=pid, title="t", concurrency_key="repo"))


@pytest.mark.anyio
async def test_wait_polls_the_task_on_nulltickets(remote, fake) -> None:
    pid = await _pipeline(remote)
    tid = await remote.create_task(TaskCreate(pipeline_id=pid, title="t"))
    pending = await remote.wait(tid, timeout_s=0.0)
    assert pending.finished is False and pending.outcome == "pending"
    lease = await remote.claim("w", "coder", 60_000)
    assert lease is not None
    await remote.add_event(lease, "result", {"answer": 42})
    await remote.transition(lease, "complete")
    done = await remote.wait(tid, timeout_s=5.0)
    assert done.finished and done.outcome == "done"
    assert done.result_event is not None and done.result_event.data == {"answer": 42}


# -- helpers --------------------------------------------------------------------------------------
class _client:
    def __init__(self, handler) -> None:
        self.tracker = RemoteTracker(
            "http://127.0.0.1:7700", retry=FAST, transport=httpx.MockTransport(handler)
        )

    async def __aenter__(self) -> RemoteTracker:
        return self.tracker

    async def __aexit__(self, *exc: object) -> None:
        await self.tracker.aclose()
