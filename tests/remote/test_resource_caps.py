"""Resource caps of a real ``tracker serve`` on 127.0.0.1 (docs/operate/security.md): one client
address holds at most its share of the connections, a pipeline definition over 1 MiB is refused
naming the limit (served and embedded), and a heartbeat body over 68 KiB (4 KiB plus a 64 KiB
checkpoint) gets 413 unread while a full checkpoint still fits."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.dashboard.conftest import process
from tests.worker.daemonkit import clean_env, make_rail
from tracker_client.agent_models import MAX_CHECKPOINT_BYTES
from tracker_client.rules.pipelines import MAX_DEFINITION_BYTES

TOO_BIG = MAX_DEFINITION_BYTES + 1024


def _big_definition() -> dict[str, object]:
    return {
        "initial": "todo",
        "states": {
            "todo": {"agent_role": "coder", "instructions": "x" * TOO_BIG},
            "done": {"terminal": True},
        },
        "transitions": [{"from": "todo", "trigger": "complete", "to": "done"}],
    }


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_one_client_cannot_hold_every_connection(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    log = tmp_path / "serve.log"
    args = ["tracker", "serve", "--tracker", f"sqlite://{db}", "--port", "0"]
    with process([*args, "--max-connections", "40"], log) as url:
        host, port = url.removeprefix("http://").split(":")
        held = []
        try:
            for _ in range(40):  # idle: connected, nothing sent
                held.append(socket.create_connection((host, int(port)), timeout=10))
            # Polling a real condition (the server's log line) under the test's timeout.
            while "the most one client may hold" not in log.read_text():
                threading.Event().wait(0.05)
            other = httpx.Client(
                transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10
            )
            with other:
                assert other.get(f"{url}/health").status_code == 200
                assert other.get(f"{url}/pipelines").status_code == 200
            closed = 0
            for sock in held[20:]:  # past the default share (half of 40): closed at once
                try:
                    closed += sock.recv(1) == b""
                except ConnectionResetError:
                    closed += 1
            assert closed == 20
        finally:
            for sock in held:
                sock.close()
    assert "20 connections open from 127.0.0.1" in log.read_text()


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_huge_pipeline_definition_and_heartbeat_body_are_refused(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    args = ["tracker", "serve", "--tracker", f"sqlite://{db}", "--port", "0"]
    with process(args, tmp_path / "serve.log") as url, httpx.Client(base_url=url) as http:
        big = http.post("/pipelines", json={"name": "big", "definition": _big_definition()})
        assert big.status_code == 400, big.text
        error = big.json()["error"]
        assert error["code"] == "definition_too_large"
        assert str(MAX_DEFINITION_BYTES) in error["message"]
        assert [p["name"] for p in http.get("/pipelines").json()] == ["flow"]
        [flow] = http.get("/pipelines").json()
        assert http.post("/tasks", json={"pipeline_id": flow["id"], "title": "t"}).is_success
        claim = {"agent_id": "w", "agent_role": "coder", "lease_ttl_ms": 60_000}
        lease = http.post("/leases/claim", json=claim).json()
        beat = f"/leases/{lease['lease_id']}/heartbeat"
        auth = {"Authorization": f"Bearer {lease['lease_token']}"}
        full = {"run_id": lease["run"]["id"], "checkpoint": "y" * (MAX_CHECKPOINT_BYTES - 2)}
        assert http.post(beat, json=full, headers=auth).status_code == 200
        over = {"run_id": lease["run"]["id"], "checkpoint": "y" * (100 * 1024)}
        refused = http.post(beat, json=over, headers=auth)
        assert refused.status_code == 413, refused.text
        assert refused.json()["error"]["code"] == "request_too_large"
        assert str(4096 + MAX_CHECKPOINT_BYTES) in refused.json()["error"]["message"]


@pytest.mark.timeout(60)
def test_the_embedded_rail_refuses_a_huge_definition_too(tmp_path: Path) -> None:
    spec = tmp_path / "big.json"
    spec.write_text(json.dumps({"name": "big", "definition": _big_definition()}))
    rail = f"sqlite://{tmp_path / 'rail.db'}"
    made = subprocess.run(
        [sys.executable, "-m", "worker", "pipeline", "create", "-f", str(spec), "--tracker", rail],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert made.returncode == 2, made.stderr
    assert "pipeline definition is too large" in made.stderr
    assert f"limit {MAX_DEFINITION_BYTES}" in made.stderr
