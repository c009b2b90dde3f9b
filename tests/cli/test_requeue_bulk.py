"""``task requeue --dead-lettered --pipeline P [--reason R] [--since D] [--stage S] [--dry-run]``:
bulk replay of dead letters through the real CLI, on an embedded rail file, on a rail served over
HTTP on 127.0.0.1, and against a plain NullTickets imitation (which cannot: said clearly). Each
bad input is refused naming what is wrong, with nothing written; ``task requeue ID`` is unchanged.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.cli.conftest import SIMPLE, Rail, invoke
from tests.remote.fake_nulltickets import FakeNullTickets
from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, TaskCreate
from tracker_client.protocol import Tracker
from tracker_client.serve.app import create_app

pytestmark = pytest.mark.timeout(60)

TOKEN = "bulk-requeue-admin-token"
HOUR_MS = 3_600_000


def _reasons(rail: Rail, ids: list[str]) -> list[str | None]:
    async def read(tracker: Tracker) -> list[str | None]:
        return [(await tracker.get_task(t)).dead_letter_reason for t in ids]

    return rail.run(read)


def _failed(rail: Rail) -> str:
    """A task of ``simple`` dead-lettered by a permanent failure (reason permanent_failure)."""

    async def fail(tracker: Tracker) -> str:
        pid = (await tracker.list_pipelines())[0].id
        policy = RetryPolicy(max_attempts=1)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="f", retry_policy=policy))
        lease = await tracker.claim("w", "coder", 60_000)
        assert lease is not None and lease.task.id == tid
        await tracker.fail(lease, "boom", retryable=False)
        return tid

    return rail.run(fail)


def _cancelled(rail: Rail, title: str = "t") -> str:
    task_id = rail.add(title)
    rail.json("task", "cancel", task_id)
    return task_id


def test_dry_run_counts_then_requeue_replays(simple: Rail) -> None:
    cancelled = [_cancelled(simple, f"c{i}") for i in range(2)]
    failed = _failed(simple)
    ids = [*cancelled, failed]

    dry = simple.cli("task", "requeue", "--dead-lettered", "-p", "simple", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.strip() == (
        "dry run: 3 dead-lettered tasks of pipeline simple would be requeued "
        "(cancelled 2, permanent_failure 1); nothing written"
    )
    assert _reasons(simple, ids) == ["cancelled", "cancelled", "permanent_failure"]

    done = simple.cli("task", "requeue", "--dead-lettered", "-p", "simple")
    assert done.exit_code == 0, done.output
    assert "requeued 3 dead-lettered tasks of pipeline simple" in done.stdout
    assert _reasons(simple, ids) == [None, None, None]
    again = simple.json("task", "requeue", "--dead-lettered", "-p", "simple")
    assert (again["requeued"], again["by_reason"], again["dry_run"]) == (0, {}, False)


def test_reason_since_and_stage_narrow_the_replay(simple: Rail) -> None:
    failed = _failed(simple)
    cancelled = _cancelled(simple)

    old = simple.add("old")

    async def old_cancel() -> None:  # two hours ago, by the rail's clock
        past = int(time.time() * 1000) - 2 * HOUR_MS
        tracker = await open_tracker(simple.url, clock=lambda: past)
        try:
            await tracker.cancel(old)
        finally:
            await tracker.aclose()

    anyio.run(old_cancel)
    since = simple.json("task", "requeue", "--dead-lettered", "-p", "simple", "--since", "1h")
    assert (since["requeued"], since["by_reason"]) == (2, {"cancelled": 1, "permanent_failure": 1})
    assert _reasons(simple, [failed, cancelled, old]) == [None, None, "cancelled"]

    for task_id in (failed, cancelled):
        simple.json("task", "cancel", task_id)
    moved = simple.json(
        "task", "requeue", "--dead-lettered", "-p", "simple", "--reason", "cancelled",
        "--stage", "check", "--keep-attempts",
    )  # fmt: skip
    assert moved["requeued"] == 3
    stages = [simple.json("task", "show", t)["task"]["stage"] for t in (failed, cancelled, old)]
    assert stages == ["check", "check", "check"]


def test_single_task_requeue_is_unchanged(simple: Rail) -> None:
    task_id = _cancelled(simple)
    result = simple.cli("task", "requeue", task_id)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"requeued task {task_id} into stage todo (fresh retry budget)"


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--reason", "cancelled"], 2, "--reason applies only with --dead-lettered"),
        (["--since", "1h"], 2, "--since applies only with --dead-lettered"),
        (["--dry-run"], 2, "--dry-run applies only with --dead-lettered"),
        (["--pipeline", "simple"], 2, "--pipeline applies only with --dead-lettered"),
        (["--dead-lettered"], 2, "--dead-lettered needs --pipeline"),
        (["--dead-lettered", "-p", "nope"], 1, "unknown pipeline 'nope'"),
        (["--dead-lettered", "-p", "simple", "--since", "soon"], 2, "'soon' is not a duration"),
        (["--dead-lettered", "-p", "simple", "--since", "0"], 2, "--since must be longer than 0"),
        (["--dead-lettered", "-p", "simple", "--stage", "limbo"], 2, "stage 'limbo'"),
        (["--dead-lettered", "-p", "simple", "--stage", "done"], 2, "'done' is terminal"),
        (["--dead-lettered", "-p", "simple", "--stage", "limbo", "--dry-run"], 2, "limbo"),
        (["--dead-lettered", "-p", "simple", "--reason", " "], 2, "--reason is empty"),
        ([], 2, "missing TASK_ID"),
        (["some-id", "--dead-lettered", "-p", "simple"], 2, "a TASK_ID or --dead-lettered"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    simple: Rail, args: list[str], code: int, needle: str
) -> None:
    task_id = _cancelled(simple)
    result = simple.cli("task", "requeue", *args)
    assert result.exit_code == code, result.output
    assert needle in result.stderr
    assert _reasons(simple, [task_id]) == ["cancelled"]


# -- over HTTP ----------------------------------------------------------------------------------
@contextmanager
def _serving(
    make_app: Callable[[], Awaitable[tuple[Any, Callable[[], Awaitable[None]]]]],
) -> Iterator[str]:
    """Serve the ASGI app ``make_app()`` builds on 127.0.0.1 in a thread; yield its URL."""
    ready, stop = threading.Event(), threading.Event()
    urls: list[str] = []
    errors: list[BaseException] = []

    async def serve() -> None:
        app, close = await make_app()
        try:
            async with serve_on_port(app) as url:
                urls.append(url)
                ready.set()
                await anyio.to_thread.run_sync(stop.wait)
        finally:
            await close()

    def target() -> None:
        try:
            anyio.run(serve)
        except BaseException as exc:  # reported below
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert ready.wait(20), "server did not start"
    if errors:
        raise errors[0]
    try:
        yield urls[0]
    finally:
        stop.set()
        thread.join(20)
        assert not thread.is_alive()
        if errors:
            raise errors[0]


def _http(url: str, *args: str) -> tuple[int, str, str]:
    result = invoke([*args, "--tracker", url])
    assert TOKEN not in result.output
    return result.exit_code, result.stdout, result.stderr


def _create_pipeline(url: str, tmp_path: Path) -> str:
    definition = tmp_path / "simple.json"
    definition.write_text(json.dumps({"name": "simple", "definition": SIMPLE}))
    code, out, err = _http(url, "pipeline", "create", "-f", str(definition), "--json")
    assert code == 0, err
    return str(json.loads(out)["id"])


def test_bulk_requeue_on_a_served_rail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def make_app() -> tuple[Any, Callable[[], Awaitable[None]]]:
        embedded = await EmbeddedTracker.open(str(tmp_path / "served.db"))
        return create_app(embedded, api_token=TOKEN), embedded.aclose

    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", TOKEN)
    with _serving(make_app) as url:
        _create_pipeline(url, tmp_path)
        ids = []
        for title in ("a", "b"):
            code, out, err = _http(url, "task", "add", "-p", "simple", title, "--json")
            assert code == 0, err
            ids.append(json.loads(out)["id"])
        assert _http(url, "task", "cancel-all", "-p", "simple", "--yes")[0] == 0
        code, out, err = _http(
            url, "task", "requeue", "--dead-lettered", "-p", "simple", "--dry-run"
        )
        assert (code, out.strip()) == (
            0,
            "dry run: 2 dead-lettered tasks of pipeline simple would be requeued (cancelled 2); "
            "nothing written",
        ), err
        code, out, err = _http(url, "task", "requeue", "--dead-lettered", "-p", "simple", "--json")
        assert code == 0, err
        assert json.loads(out)["requeued"] == 2
        code, _, err = _http(
            url, "task", "requeue", "--dead-lettered", "-p", "simple", "--stage", "limbo"
        )
        assert code == 2 and "limbo" in err
        for task_id in ids:
            code, out, err = _http(url, "task", "show", task_id, "--json")
            assert code == 0, err
            assert json.loads(out)["task"]["dead_letter_reason"] is None


def _asgi_of(fake: FakeNullTickets) -> Any:
    """The fake NullTickets server as a tiny ASGI app (so it answers real HTTP)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        target = scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        request = httpx.Request(
            scope["method"], "http://127.0.0.1" + target, headers=scope["headers"], content=body
        )
        answer = fake.handle(request)
        headers = [(k.encode(), v.encode()) for k, v in answer.headers.items()]
        await send(
            {"type": "http.response.start", "status": answer.status_code, "headers": headers}
        )
        await send({"type": "http.response.body", "body": answer.content})

    return app


def test_a_plain_nulltickets_server_says_it_cannot(tmp_path: Path) -> None:
    fake = FakeNullTickets()

    async def make_app() -> tuple[Any, Callable[[], Awaitable[None]]]:
        async def close() -> None:
            return None

        return _asgi_of(fake), close

    with _serving(make_app) as url:
        pid = _create_pipeline(url, tmp_path)  # by id: NullTickets cannot list pipelines
        for extra in ([], ["--dry-run"]):
            code, _, err = _http(url, "task", "requeue", "--dead-lettered", "-p", pid, *extra)
            assert code == 1, err
            assert (
                "task requeue --dead-lettered: requeue_all is not supported by the tracker" in err
            )
            assert "NullTickets server has no such endpoint" in err
    assert not any(r.url.path == "/ops/requeue-all" for r in fake.requests)
