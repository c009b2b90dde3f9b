"""Rails for the producer tests: a real embedded rail file holding the ``review`` pipeline of
``examples/pipelines/review.toml``, and the same file served over HTTP on 127.0.0.1 (uvicorn in
its own event-loop thread, so blocking and async tests alike can talk to it)."""

from __future__ import annotations

import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import start_blocking_portal

from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import create_app

ROOT = Path(__file__).resolve().parents[2]
REVIEW = tomllib.loads((ROOT / "examples" / "pipelines" / "review.toml").read_text())
TOKEN = "producer-test-admin-token"


@dataclass(frozen=True)
class Target:
    """A rail to produce on: its URL, its api token (None for a file) and the file behind it."""

    url: str
    token: str | None
    path: Path


def make_rail(path: Path, *, other: bool = True) -> Path:
    """A new rail file with the ``review`` pipeline (and ``reviews``, a close name)."""

    async def create() -> None:
        tracker = await EmbeddedTracker.open(str(path))
        try:
            await tracker.create_pipeline(REVIEW["name"], REVIEW["definition"])
            if other:
                await tracker.create_pipeline("reviews", REVIEW["definition"])
        finally:
            await tracker.aclose()

    anyio.run(create)
    return path


def count_tasks(path: Path) -> int:
    """How many tasks the rail file holds (read with its own tracker)."""

    async def count() -> int:
        tracker = await EmbeddedTracker.open(str(path))
        try:
            return int(await tracker.call("count_tasks"))
        finally:
            await tracker.aclose()

    return anyio.run(count)


@contextmanager
def served(path: Path, token: str = TOKEN) -> Iterator[str]:
    """Serve the rail file on 127.0.0.1 from a thread of its own; yield its base URL."""

    @asynccontextmanager
    async def serve() -> AsyncIterator[str]:
        embedded = await EmbeddedTracker.open(str(path))
        try:
            async with serve_on_port(create_app(embedded, api_token=token)) as url:
                yield url
        finally:
            await embedded.aclose()

    with start_blocking_portal() as portal, portal.wrap_async_context_manager(serve()) as url:
        yield url


@pytest.fixture(params=["embedded", "served"])
def target(request: Any, tmp_path: Path) -> Iterator[Target]:
    """The same rail reached as a file and over HTTP on 127.0.0.1."""
    path = make_rail(tmp_path / "rail.db")
    if request.param == "embedded":
        yield Target(f"sqlite:///{path}", None, path)
    else:
        with served(path) as url:
            yield Target(url, TOKEN, path)
