"""Fixtures of the operator CLI tests: a real embedded rail in ``tmp_path`` and a CLI runner.

Every invocation goes through the real ``backlog-worker`` click group; the helper checks that no
exception escaped (an error must be one line on stderr and an exit code, never a traceback).
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from click.testing import CliRunner, Result

from tracker_client.factory import open_tracker
from tracker_client.protocol import Tracker
from worker.cli import main

T = TypeVar("T")

#: todo (role coder) -complete-> done; a dead-letter stage; a second role for role filters.
SIMPLE = {
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


def invoke(args: list[str], input: str | None = None) -> Result:
    """Run ``backlog-worker ARGS``; fail the test if an exception (a traceback) escaped."""
    result = CliRunner().invoke(main, args, input=input, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"exception escaped the CLI: {result.exception!r}\n{result.output}")
    assert "Traceback" not in result.stderr
    return result


class Rail:
    """An embedded rail file and helpers to drive it through the CLI or directly."""

    def __init__(self, path: Path, query: str = "") -> None:
        self.path = path
        self.url = f"sqlite:///{path}{query}"

    def cli(self, *args: str, input: str | None = None) -> Result:
        """``backlog-worker ARGS --tracker URL``."""
        return invoke([*args, "--tracker", self.url], input=input)

    def json(self, *args: str) -> Any:
        """Run with ``--json``, expect exit 0, return the parsed stdout."""
        result = self.cli(*args, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    @asynccontextmanager
    async def tracker(self) -> AsyncIterator[Tracker]:
        """The rail opened directly (as a worker would)."""
        tracker = await open_tracker(self.url)
        try:
            yield tracker
        finally:
            await tracker.aclose()

    def run(self, fn: Callable[[Tracker], Awaitable[T]]) -> T:
        """Run ``fn(tracker)`` to completion (seeding, inspecting)."""

        async def main() -> T:
            async with self.tracker() as tracker:
                return await fn(tracker)

        return anyio.run(main)

    def pipeline(self, name: str = "simple", definition: dict[str, Any] | None = None) -> str:
        """Create a pipeline through the CLI; its id."""
        path = self.path.parent / f"{name}.json"
        path.write_text(json.dumps({"name": name, "definition": definition or SIMPLE}))
        return str(self.json("pipeline", "create", "--file", str(path))["id"])

    def add(self, title: str, *flags: str, pipeline: str = "simple") -> str:
        """Add a task through the CLI; its id."""
        return str(self.json("task", "add", "-p", pipeline, title, *flags)["id"])


class Background:
    """Run ``fn(tracker)`` in a thread with its own loop and tracker (another 'process')."""

    def __init__(self, rail: Rail, fn: Callable[[Tracker], Awaitable[None]]) -> None:
        self.errors: list[BaseException] = []

        def target() -> None:
            try:
                rail.run(fn)
            except BaseException as exc:  # reported by join()
                self.errors.append(exc)

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "background worker did not finish"
        if self.errors:
            raise self.errors[0]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No BACKLOG_WORKER_* settings from the outside; relative paths land in tmp_path."""
    import os

    for name in list(os.environ):
        if name.startswith("BACKLOG_WORKER_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")  # rich tables: no wrapping inside the asserted words


@pytest.fixture
def rail(tmp_path: Path) -> Rail:
    """An empty embedded rail file (created: only `pipeline create` starts a new one)."""
    rail = Rail(tmp_path / "rail.db")

    async def touch(tracker: Tracker) -> None:
        await tracker.health()

    rail.run(touch)
    return rail


@pytest.fixture
def simple(rail: Rail) -> Rail:
    """A rail with the ``simple`` pipeline."""
    rail.pipeline()
    return rail


@contextmanager
def served_in_thread(
    path: Path,
    *,
    api_token: str | None = None,
    setup: Callable[[Any], Awaitable[Any]] | None = None,
    **options: Any,
) -> Iterator[str]:
    """The rail at ``path`` served by uvicorn on 127.0.0.1 in a thread; yields its URL.

    ``setup(tracker)`` runs on the embedded tracker before it is served; ``options`` open it.
    """
    from tests.remote.fixtures import serve_on_port
    from tracker_client.embedded import EmbeddedTracker
    from tracker_client.serve.app import create_app

    ready, stop = threading.Event(), threading.Event()
    urls: list[str] = []
    errors: list[BaseException] = []

    async def serve() -> None:
        embedded = await EmbeddedTracker.open(str(path), **options)
        try:
            if setup is not None:
                await setup(embedded)
            async with serve_on_port(create_app(embedded, api_token=api_token)) as url:
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
