"""The operator commands against a served rail over HTTP on 127.0.0.1 (the remote tracker)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.cli.conftest import SIMPLE, invoke

pytest.importorskip("tracker_client.nulltickets.client")
pytest.importorskip("tracker_client.serve.app")

from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import create_app

TOKEN = "s3cret-admin-token"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A rail served with an api token by uvicorn in a thread; yields its URL."""
    ready, stop = threading.Event(), threading.Event()
    urls: list[str] = []
    errors: list[BaseException] = []

    async def serve() -> None:
        embedded = await EmbeddedTracker.open(str(tmp_path / "served.db"), max_backlog_depth=3)
        try:
            async with serve_on_port(create_app(embedded, api_token=TOKEN)) as url:
                urls.append(url)
                ready.set()
                await anyio.to_thread.run_sync(stop.wait)
        finally:
            await embedded.aclose()

    def target() -> None:
        try:
            anyio.run(serve)
        except BaseException as exc:
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


def remote(url: str, *args: str) -> tuple[int, str, str]:
    result = invoke([*args, "--tracker", url])
    assert TOKEN not in result.output
    return result.exit_code, result.stdout, result.stderr


def test_operate_a_served_rail(
    served: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", TOKEN)
    definition = tmp_path / "simple.json"
    definition.write_text(json.dumps({"name": "simple", "definition": SIMPLE}))
    code, _, err = remote(served, "pipeline", "create", "-f", str(definition))
    assert code == 0, err

    code, out, err = remote(served, "task", "add", "-p", "simple", "remote task", "--json")
    assert code == 0, err
    task_id = json.loads(out)["id"]
    code, out, _ = remote(served, "task", "list", "--json")
    assert [t["id"] for t in json.loads(out)["items"]] == [task_id]
    code, out, _ = remote(served, "task", "show", task_id)
    assert code == 0
    assert "remote task" in out
    code, out, _ = remote(served, "queue", "--json")
    assert code == 0
    assert any(r["role"] == "coder" for r in json.loads(out)["roles"])

    code, _, err = remote(served, "submit", "-p", "simple", "w", "--wait", "--timeout", "200ms")
    assert code == 5
    assert "stays queued" in err

    code, out, _ = remote(served, "task", "cancel", task_id)
    assert code == 0
    code, out, _ = remote(served, "task", "requeue", task_id)
    assert code == 0
    code, _, err = remote(served, "task", "show", "no-such-task")
    assert code == 1
    assert "unknown task 'no-such-task'" in err

    remote(served, "task", "add", "-p", "simple", "third")
    code, _, err = remote(served, "task", "add", "-p", "simple", "fourth")
    assert code == 4
    assert "backlog of role 'coder' is full: 3 waiting, cap 3" in err


def test_wrong_token_is_refused_without_echoing_it(
    served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", "wrong-token")
    result = invoke(["task", "list", "--tracker", served])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert "wrong-token" not in result.output
