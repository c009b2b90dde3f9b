"""Fixtures of the dashboard tests: a seeded embedded rail, the served app in process, a real
``tracker serve`` process, and where screenshots go.

The seed holds what the pages must show safely: a task titled ``<script>alert(1)</script>``
(with markup in its metadata, an event and an artifact URI), a dead-lettered task and a running
one (its lease held for ten minutes), so every page has each state to render.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.remote.fixtures import wait_listening
from tracker_client.dashboard import DashboardSettings, create_dashboard
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import ArtifactCreate, TaskCreate
from tracker_client.serve.app import create_app

TOKEN = "dashboard-admin-token-0123456789"
SCRIPT_TITLE = "<script>alert(1)</script>"
MARKUP = '<img src=x onerror="alert(2)">'

PIPELINE = {
    "initial": "todo",
    "states": {
        "todo": {"agent_role": "coder"},
        "check": {"agent_role": "checker"},
        "done": {"terminal": True},
        "dead": {"terminal": True},
    },
    "transitions": [
        {"from": "todo", "trigger": "complete", "to": "done"},
        {"from": "todo", "trigger": "verify", "to": "check"},
        {"from": "check", "trigger": "approve", "to": "done"},
    ],
}


@dataclass(frozen=True)
class Seeded:
    """The ids of the seeded tasks."""

    pipeline: str
    script: str
    dead: str
    running: str


async def seed(tracker: EmbeddedTracker) -> Seeded:
    """A pipeline and three tasks: dead-lettered, running, and one titled with a script."""
    pid = await tracker.create_pipeline("simple", PIPELINE)
    dead = await tracker.create_task(TaskCreate(pipeline_id=pid, title="to be dead", priority=5))
    lease = await tracker.claim("agent-1", "coder", 600_000)
    assert lease is not None and lease.task.id == dead
    await tracker.add_event(lease, "log", {"line": MARKUP})
    await tracker.fail(lease, "it broke </pre><b>bold</b>", retryable=False)
    running = await tracker.create_task(TaskCreate(pipeline_id=pid, title="busy one", priority=10))
    lease = await tracker.claim("agent-2", "coder", 600_000)
    assert lease is not None and lease.task.id == running
    await tracker.add_event(lease, "progress", {"note": SCRIPT_TITLE})
    script = await tracker.create_task(
        TaskCreate(
            pipeline_id=pid,
            title=SCRIPT_TITLE,
            description=f"desc {MARKUP}",
            metadata={"html": MARKUP, SCRIPT_TITLE: 1},
        )
    )
    await tracker.add_artifact(
        ArtifactCreate(kind="report", uri="javascript:alert(3)", task_id=script)
    )
    extensions = (await tracker.capabilities()).extensions
    if "spans" in extensions:
        await tracker.call("ingest_traces", document=_trace(running, lease.run_id))
    if "workers" in extensions:
        await tracker.call(
            "register_worker",
            "worker-a",
            host=f"host {MARKUP}",
            pid=4242,
            version="0.1.0",
            roles=["coder"],
            slots=2,
            agent_id="agent-2",
            started_at_ms=1,
        )
    return Seeded(pid, script, dead, running)


def _trace(task_id: str, run_id: str) -> dict[str, object]:
    """An OTLP/JSON document with one span linked to the task and run (its name is markup)."""
    attrs = [
        {"key": "nulltickets.task_id", "value": {"stringValue": task_id}},
        {"key": "nulltickets.run_id", "value": {"stringValue": run_id}},
    ]
    span = {
        "traceId": "0123456789abcdef0123456789abcdef",
        "spanId": "0123456789abcdef",
        "name": f"executor {SCRIPT_TITLE}",
        "kind": 1,
        "startTimeUnixNano": "1735689600000000000",
        "endTimeUnixNano": "1735689601500000000",
        "attributes": attrs,
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "bw"}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedTracker, Seeded]]:
    """A seeded embedded rail in ``tmp_path``."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        yield tracker, await seed(tracker)
    finally:
        await tracker.aclose()


def client(app: object) -> httpx.AsyncClient:
    """An httpx client talking to ``app`` in process (no redirects followed)."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]
        base_url="http://127.0.0.1",
        follow_redirects=False,
    )


@pytest.fixture
async def served(
    embedded: tuple[EmbeddedTracker, Seeded],
) -> AsyncIterator[tuple[httpx.AsyncClient, EmbeddedTracker, Seeded]]:
    """The served app (with the admin token) of the seeded rail, as ``tracker serve`` builds it."""
    tracker, ids = embedded
    async with client(create_app(tracker, api_token=TOKEN)) as http:
        yield http, tracker, ids


@pytest.fixture
async def open_rail(
    embedded: tuple[EmbeddedTracker, Seeded],
) -> AsyncIterator[tuple[httpx.AsyncClient, EmbeddedTracker, Seeded]]:
    """The served app of the seeded rail without an admin token (read-only dashboard)."""
    tracker, ids = embedded
    async with client(create_app(tracker)) as http:
        yield http, tracker, ids


def dashboard_app(tracker: Any, **settings: Any) -> object:
    """The dashboard alone (mounted at the root: links start with ``/``)."""
    return create_dashboard(tracker, DashboardSettings(**settings))


def artifacts_dir() -> Path:
    """Where screenshots are kept: ``$BW_TEST_ARTIFACTS``, else ``.test-artifacts/`` in the
    repository (git-ignored)."""
    base = os.environ.get("BW_TEST_ARTIFACTS")
    root = Path(base) if base else Path(__file__).resolve().parents[2] / ".test-artifacts"
    path = root / "dashboard"
    path.mkdir(parents=True, exist_ok=True)
    return path


def clean_env() -> dict[str, str]:
    """This environment without any BACKLOG_WORKER_* setting (a child sees only its flags)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}


@contextmanager
def process(args: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """``python -m worker ARGS`` as a real process (``env`` added to a clean environment);
    yields the URL it announces, stops it by its pid (SIGTERM) at the end."""
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env={**clean_env(), **(env or {})},
        )
    try:
        yield wait_listening(log, proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def seed_file(path: Path) -> Seeded:
    """Seed the rail file at ``path`` (then closed: a served process opens it)."""

    async def main() -> Seeded:
        tracker = await EmbeddedTracker.open(str(path))
        try:
            return await seed(tracker)
        finally:
            await tracker.aclose()

    return anyio.run(main)
