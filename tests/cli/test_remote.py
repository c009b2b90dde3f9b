"""The operator commands against a served rail over HTTP on 127.0.0.1 (the remote tracker)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import SIMPLE, invoke, served_in_thread

pytest.importorskip("tracker_client.nulltickets.client")
pytest.importorskip("tracker_client.serve.app")


TOKEN = "s3cret-admin-token"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A rail served with an api token by uvicorn in a thread; yields its URL."""
    with served_in_thread(tmp_path / "served.db", api_token=TOKEN, max_backlog_depth=3) as url:
        yield url


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
