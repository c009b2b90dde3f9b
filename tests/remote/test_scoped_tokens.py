"""Scoped tokens on a real ``tracker serve`` (docs/operate/security.md#scoped-tokens).

A worker token drains its role through a real worker process and is refused another role and
the admin's operations; a producer token submits to and reads its pipeline only; a read token
reads only; tokens made or revoked while the server runs take effect without a restart; an
unknown token is throttled; no token value ever reaches the server's log or a refusal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.worker.daemonkit import (
    TOKEN,
    clean_env,
    reap,
    serve_tracker,
    spawn_worker,
    wait_for,
    write_config,
)
from tracker_client.contract import table as contract
from tracker_client.serve.scopes import ALLOWED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CLI = (sys.executable, "-m", "worker")


def _cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args, "--tracker", f"sqlite://{db}"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )


def _token(db: Path, name: str, *flags: str) -> str:
    made = _cli(db, "token", "create", name, *flags)
    assert made.returncode == 0, made.stderr
    value = made.stdout.strip()
    assert value.startswith("bwt_") and len(value) > 40
    assert value not in made.stderr
    return value


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with serve_tracker(tmp_path) as (url, db):
        yield url, db


def _call(url: str, token: str, method: str, path: str, body: Any = None) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=10) as client:
        return client.request(method, path, json=body, headers={"Authorization": f"Bearer {token}"})


def _pipeline_id(url: str, name: str = "flow") -> str:
    pipelines = _call(url, TOKEN, "GET", "/pipelines").json()
    return str(next(p["id"] for p in pipelines if p["name"] == name))


def test_every_operation_of_the_contract_is_classified() -> None:
    names = {op.name for op in contract.OPERATIONS}
    assert set(ALLOWED) == names
    for op in contract.OPERATIONS:
        kinds = ALLOWED[op.name]
        assert kinds <= {"any", "worker", "producer", "read"}
        if "read" in kinds:
            assert op.method == "GET", op.name  # a read token never writes
        if op.name.startswith("store_"):
            assert "read" not in kinds and "producer" not in kinds
    admin_only = {n for n, k in ALLOWED.items() if not k}
    assert {"create_pipeline", "purge", "requeue_all", "cancel_all", "set_rate_limit"} <= admin_only


def test_a_worker_token_drains_its_role_and_nothing_else(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, db = served
    worker_token = _token(db, "host-a", "--kind", "worker", "--role", "coder")
    for n in range(5):
        assert (
            _call(
                url, TOKEN, "POST", "/tasks", {"pipeline_id": _pipeline_id(url), "title": f"t{n}"}
            ).status_code
            == 201
        )
    config = write_config(tmp_path, url, token=worker_token, argv=["true"], drain=True)
    proc = spawn_worker(config, tmp_path / "worker.log")
    try:
        assert proc.wait(60) == 0, (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        reap(proc)
    tasks = _call(url, TOKEN, "GET", "/tasks").json()["items"]
    assert [t["stage"] for t in tasks] == ["done"] * 5

    other = _call(
        url, worker_token, "POST", "/leases/claim", {"agent_id": "a", "agent_role": "review"}
    )
    assert other.status_code == 403
    error = other.json()["error"]
    assert error["code"] == "forbidden"
    assert "may not claim role 'review'" in error["message"]
    assert "roles coder" in error["message"] and "'host-a'" in error["message"]
    assert worker_token not in other.text

    admin = _call(url, worker_token, "POST", "/pipelines", {"name": "x", "definition": {}})
    assert admin.status_code == 403
    assert "may not call create_pipeline (POST /pipelines)" in admin.json()["error"]["message"]
    log = (tmp_path / "serve.log").read_text()
    assert "scope_refused" in log or "refused POST /leases/claim" in log
    assert worker_token not in log and "bwt_" not in log


def test_a_producer_token_uses_its_pipelines_only(served: tuple[str, Path]) -> None:
    url, db = served
    other = _call(
        url,
        TOKEN,
        "POST",
        "/pipelines",
        {
            "name": "other",
            "definition": {
                "initial": "a",
                "states": {"a": {"agent_role": "x"}, "b": {"terminal": True}},
                "transitions": [{"from": "a", "to": "b", "trigger": "go"}],
            },
        },
    )
    assert other.status_code in (200, 201), other.text
    flow, theirs = _pipeline_id(url), _pipeline_id(url, "other")
    producer = _token(db, "billing", "--kind", "producer", "--pipeline", "flow")

    mine = _call(url, producer, "POST", "/tasks", {"pipeline_id": flow, "title": "mine"})
    assert mine.status_code == 201, mine.text
    task_id = mine.json()["id"]
    assert _call(url, producer, "GET", f"/tasks/{task_id}").status_code == 200
    assert _call(url, producer, "GET", f"/tasks?pipeline_id={flow}").status_code == 200
    assert _call(url, producer, "POST", f"/tasks/{task_id}/cancel", {}).status_code == 200

    refused = _call(url, producer, "POST", "/tasks", {"pipeline_id": theirs, "title": "no"})
    assert refused.status_code == 403
    assert f"may not create tasks in pipeline {theirs!r}" in refused.json()["error"]["message"]
    bulk = _call(
        url,
        producer,
        "POST",
        "/tasks/bulk",
        {"tasks": [{"pipeline_id": flow, "title": "ok"}, {"pipeline_id": theirs, "title": "no"}]},
    )
    assert bulk.status_code == 403
    theirs_task = _call(url, TOKEN, "POST", "/tasks", {"pipeline_id": theirs, "title": "t"}).json()
    read = _call(url, producer, "GET", f"/tasks/{theirs_task['id']}")
    assert read.status_code == 403 and "not in its pipelines" in read.json()["error"]["message"]
    unfiltered = _call(url, producer, "GET", "/tasks")
    assert unfiltered.status_code == 403 and "add pipeline_id" in unfiltered.text
    claim = _call(url, producer, "POST", "/leases/claim", {"agent_id": "a", "agent_role": "coder"})
    assert claim.status_code == 403
    titles = [t["title"] for t in _call(url, TOKEN, "GET", "/tasks").json()["items"]]
    assert "no" not in titles and "ok" not in titles  # a refused bulk wrote nothing


def test_a_read_token_reads_only(served: tuple[str, Path]) -> None:
    url, db = served
    reader = _token(db, "grafana", "--kind", "read")
    assert _call(url, reader, "GET", "/ops/queue").status_code == 200
    assert _call(url, reader, "GET", "/tasks").status_code == 200
    write = _call(url, reader, "POST", "/tasks", {"pipeline_id": _pipeline_id(url), "title": "x"})
    assert write.status_code == 403
    assert "read token" in write.json()["error"]["message"]
    assert _call(url, reader, "GET", "/store/ns").status_code == 403


def test_tokens_made_and_revoked_take_effect_without_a_restart(served: tuple[str, Path]) -> None:
    url, db = served
    reader = _token(db, "later", "--kind", "read")
    wait_for(
        lambda: _call(url, reader, "GET", "/ops/queue").status_code == 200, 10, "the new token"
    )
    revoked = _cli(db, "token", "revoke", "later")
    assert revoked.returncode == 0 and "revoked read token 'later'" in revoked.stdout
    wait_for(
        lambda: _call(url, reader, "GET", "/ops/queue").status_code == 401, 10, "the revocation"
    )
    listed = json.loads(_cli(db, "token", "list", "--json").stdout)
    assert listed == []


def test_an_unknown_token_is_refused_and_throttled(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, _db = served
    answers = [_call(url, "bwt_guess", "GET", "/ops/queue").status_code for _ in range(12)]
    assert answers[0] == 401 and answers[-1] == 429
    log = (tmp_path / "serve.log").read_text()
    assert "failed authentication" in log and "bwt_guess" not in log


def test_scoped_tokens_need_an_admin_token(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    assert _token(db, "w", "--kind", "worker", "--role", "coder")
    done = subprocess.run(
        [*CLI, "tracker", "serve", "--tracker", f"sqlite://{db}", "--create", "--port", "0"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "scoped tokens need an admin token beside them" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("w", "--kind", "worker"), "a worker token names its roles"),
        (("p", "--kind", "producer", "--role", "x"), "a producer token names its pipelines"),
        (("r", "--kind", "read", "--role", "x"), "a read token reads everything"),
        (("bad name", "--kind", "read"), "a name is 1-128 letters"),
    ],
)
def test_a_bad_token_request_is_named_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    db = tmp_path / "rail.db"
    done = _cli(db, "token", "create", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert not (tmp_path / "rail.db.tokens.json").exists()


def test_token_commands_refuse_what_they_cannot_do(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    _token(db, "w", "--kind", "read")
    twice = _cli(db, "token", "create", "w", "--kind", "read")
    assert twice.returncode == 2 and "'w' exists already" in twice.stderr
    missing = _cli(db, "token", "revoke", "nobody")
    assert missing.returncode == 2 and "no token with id or name 'nobody'" in missing.stderr
    remote = subprocess.run(
        [*CLI, "token", "list", "--tracker", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert remote.returncode == 2 and "run this on the host of `tracker serve`" in remote.stderr
    assert (tmp_path / "rail.db.tokens.json").stat().st_mode & 0o777 == 0o600


def test_a_read_token_opens_the_dashboard_without_buttons(served: tuple[str, Path]) -> None:
    url, db = served
    reader = _token(db, "wallboard", "--kind", "read")
    worker_token = _token(db, "host-b", "--kind", "worker", "--role", "coder")
    task = _call(url, TOKEN, "POST", "/tasks", {"pipeline_id": _pipeline_id(url), "title": "x"})
    task_id = task.json()["id"]
    with httpx.Client(base_url=url, timeout=10) as browser:
        page = browser.get(f"/ui/tasks/{task_id}", headers={"Authorization": f"Bearer {reader}"})
        assert page.status_code == 200
        assert "read-only" in page.text and 'id="requeue"' not in page.text
        assert reader not in page.text
        denied = browser.get("/ui/", headers={"Authorization": f"Bearer {worker_token}"})
        assert denied.status_code in (302, 303, 401)  # only admin and read tokens see pages
        login = browser.post("/ui/login", data={"token": reader, "next": "/ui/"})
        assert login.status_code == 303
        cancel = browser.post(f"/ui/tasks/{task_id}/cancel", data={"csrf": "x"})
        assert cancel.status_code in (403, 401)
    assert _call(url, TOKEN, "GET", f"/tasks/{task_id}").json().get("dead_letter_reason") is None
