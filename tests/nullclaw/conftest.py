"""Fixtures for the nullclaw executor tests: the fake binary, a recording sink, a context."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext, ReportPolicy
from plugins.context_hooks import ContextHooks
from tracker_client.models import ArtifactCreate, Run, Task

FAKE_SRC = Path(__file__).with_name("fake_nullclaw.py")


class RecordingSink:
    """A ContextSink that keeps everything in lists."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, Any]]] = []
        self.artifacts: list[ArtifactCreate] = []

    async def emit_events(self, events: list[tuple[str, Any]]) -> None:
        self.batches.append(list(events))

    async def emit_artifact(self, artifact: ArtifactCreate) -> str:
        self.artifacts.append(artifact)
        return f"artifact-{len(self.artifacts)}"

    @property
    def events(self) -> list[tuple[str, Any]]:
        """Every event written, in order, batches as written (``{"batch": [...]}`` merged)."""
        return [e for batch in self.batches for e in batch]

    def items(self, kind: str) -> list[Any]:
        """Every payload of ``kind``, with merged batches expanded."""
        out: list[Any] = []
        for k, data in self.events:
            if k != kind:
                continue
            if isinstance(data, dict) and set(data) == {"batch"}:
                out.extend(data["batch"])
            else:
                out.append(data)
        return out


def make_task(**over: Any) -> Task:
    base: dict[str, Any] = {
        "id": "task-1",
        "pipeline_id": "pipe-1",
        "stage": "coding",
        "title": "Add a hello function",
        "description": "Write hello() returning 'hi'.",
        "priority": 0,
        "metadata": {"repo": "demo"},
        "task_version": 1,
        "next_eligible_at_ms": 0,
        "retry_delay_ms": 0,
        "created_at_ms": 1,
        "updated_at_ms": 1,
    }
    base.update(over)
    return Task.model_validate(base)


def make_ctx(
    workdir: Path,
    sink: RecordingSink,
    *,
    instructions: str | None = None,
    deadline: float | None = None,
    shutdown: anyio.Event | None = None,
    run_id: str = "run-1",
    **task_over: Any,
) -> ExecutionContext:
    task = make_task(**task_over)
    run = Run(
        id=run_id,
        task_id=task.id,
        attempt=1,
        status="running",
        agent_id="agent-1",
        agent_role="coder",
        started_at_ms=1,
    )
    workdir.mkdir(parents=True, exist_ok=True)
    return ExecutionContext(
        task=task,
        run=run,
        hooks=ContextHooks(sink, workdir, policy=ReportPolicy(flush_interval_s=0.05)),
        instructions=instructions,
        deadline=deadline,
        shutdown=shutdown,
    )


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """The fake nullclaw as an executable ``nullclaw`` in its own bin directory."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    dest = bindir / "nullclaw"
    dest.write_text(FAKE_SRC.read_text())
    dest.chmod(0o755)
    return dest


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the fake writes what it was given (argv, env, cwd, prompt, config)."""
    path = tmp_path / "record.json"
    monkeypatch.setenv("FAKE_NULLCLAW_RECORD", str(path))
    return path


def read_record(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture
def options(fake_bin: Path) -> dict[str, Any]:
    """Options of a role using the fake binary with a generated config."""
    return {
        "binary": str(fake_bin),
        "provider": "fakellm",
        "model": "fake-model",
        "base_url": "http://127.0.0.1:9/v1",
        "env_passthrough": ["FAKE_NULLCLAW_*"],
        "kill_grace_s": 0.5,
        "progress_interval_s": 0.05,
        "timeout_s": 30,
    }


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


async def wait_pidfile(path: Path, deadline_s: float = 20.0) -> dict[str, int]:
    """Poll (with a deadline) for the fake's pid file; returns role -> pid."""
    end = time.monotonic() + deadline_s
    while not path.exists():
        assert time.monotonic() < end, f"the fake never wrote {path}"
        await anyio.sleep(0.02)
    pids = {}
    for line in path.read_text().splitlines():
        role, pid = line.split()
        pids[role] = int(pid)
    return pids


@pytest.fixture
def pidfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The fake's pid file; whatever it names is SIGKILLed at teardown (test hygiene)."""
    path = tmp_path / "pids.txt"
    monkeypatch.setenv("FAKE_NULLCLAW_PIDFILE", str(path))
    yield path
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(line.split()[1]), signal.SIGKILL)


@pytest.fixture
def python_only_path(tmp_path: Path, fake_bin: Path) -> str:
    """A PATH holding only the fake nullclaw and python3 (so: no curl)."""
    bindir = tmp_path / "pybin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    (bindir / "nullclaw").symlink_to(fake_bin)
    assert shutil.which("curl", path=str(bindir)) is None
    return str(bindir)
