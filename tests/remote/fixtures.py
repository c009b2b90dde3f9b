"""Serving an embedded tracker for tests: in-process (ASGI transport) or on a real 127.0.0.1 port.

``served_asgi`` and ``served_tcp`` are async context managers yielding a :class:`RemoteTracker`
talking to an :class:`EmbeddedTracker` through ``tracker_client.serve.app``; the embedded tracker
keeps the test's fake clock and options, so the contract suite runs unchanged through HTTP.
"""

from __future__ import annotations

import contextlib
import math
import re
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn

from tracker_client.embedded import EmbeddedTracker
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings
from tracker_client.serve.app import create_app

#: Retries short enough for tests, long enough to ride out a busy database.
TEST_RETRY = RetrySettings(attempts=5, initial_s=0.01, max_wait_s=0.2, budget_s=10.0)


class QuietServer(uvicorn.Server):
    """A uvicorn server for tests: no signal handlers, readiness and stop as events.

    uvicorn's own main loop polls ``should_exit`` every 100 ms; here ``stop()`` ends it at once,
    and ``ready`` is set when the socket listens (no polling, no sleeping).
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()
        self._stop = anyio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        self.ready.set()
        await self._stop.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's graceful shutdown without its fixed 100 ms ticks: stop accepting, ask every
        open connection to shut down (an idle kept-alive one closes at once, a busy one after
        its answer), then poll for them and their tasks to end (ticks of 5 ms, under uvicorn's
        own graceful timeout when one is set)."""
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        with anyio.move_on_after(self.config.timeout_graceful_shutdown or math.inf):
            while self.server_state.connections or self.server_state.tasks:
                await anyio.sleep(0.005)  # polling a real condition, under a deadline
        for task in self.server_state.tasks:
            task.cancel()
        for server in self.servers:
            await server.wait_closed()

    def stop(self) -> None:
        """Ask the server to shut down (graceful: open connections are finished)."""
        self.should_exit = True
        self._stop.set()


def uvicorn_config(app: Any, sock: socket.socket) -> uvicorn.Config:
    """A quiet uvicorn config for ``app`` on an already bound socket."""
    host, port = sock.getsockname()[:2]
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="off",
        ws="none",
        http="h11",
    )


@asynccontextmanager
async def serve_on_port(app: Any) -> AsyncIterator[str]:
    """Run ``app`` with uvicorn on an ephemeral 127.0.0.1 port; yield its base URL.

    Readiness is an event set when uvicorn enters its main loop (the socket listens); shutdown
    waits for the server task to end.
    """
    # IPPROTO_TCP named (not 0): asyncio sets TCP_NODELAY only on accepted sockets whose
    # ``proto`` says TCP, and they take the listener's. Without it uvicorn's answer (head and
    # body written apart) waited ~40 ms per request on a kept-alive connection for the peer's
    # delayed ACK (Nagle): the remote-tcp contract runs were ~5x the in-process ones.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = QuietServer(uvicorn_config(app, sock))
    try:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                try:
                    await server.serve([sock])
                finally:
                    server.ready.set()  # also when start-up failed: do not wait in vain

            tg.start_soon(run)
            with anyio.fail_after(10):
                await server.ready.wait()
            if not server.started:
                raise RuntimeError("uvicorn did not start")
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                server.stop()
    finally:
        sock.close()


@asynccontextmanager
async def served_asgi(
    path: Path, clock: Any = None, options: Mapping[str, Any] | None = None, **client: Any
) -> AsyncIterator[RemoteTracker]:
    """RemoteTracker -> httpx.ASGITransport -> served EmbeddedTracker (in process)."""
    embedded = await EmbeddedTracker.open(str(path), clock=clock, **dict(options or {}))
    try:
        app = create_app(embedded, api_token=client.pop("server_token", None))
        transport = httpx.ASGITransport(app=app)
        remote = RemoteTracker(
            "http://127.0.0.1:7700", retry=TEST_RETRY, transport=transport, **client
        )
        try:
            await remote.health()  # as a worker does at startup: learn the server's extensions
            yield remote
        finally:
            await remote.aclose()
    finally:
        await embedded.aclose()


@asynccontextmanager
async def served_tcp(
    path: Path, clock: Any = None, options: Mapping[str, Any] | None = None, **client: Any
) -> AsyncIterator[RemoteTracker]:
    """RemoteTracker -> TCP 127.0.0.1 -> uvicorn -> served EmbeddedTracker."""
    embedded = await EmbeddedTracker.open(str(path), clock=clock, **dict(options or {}))
    try:
        app = create_app(embedded, api_token=client.pop("server_token", None))
        async with serve_on_port(app) as url:
            remote = RemoteTracker(url, retry=TEST_RETRY, **client)
            try:
                await remote.health()
                yield remote
            finally:
                await remote.aclose()
    finally:
        await embedded.aclose()


def wait_listening(log: Path, proc: subprocess.Popen[bytes], deadline_s: float = 20.0) -> str:
    """The URL a real ``tracker serve --port 0`` process announces in ``log`` once it listens
    (``--port 0``: no port races); AssertionError with the log if it exits or stays silent."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {log.read_text()}")
        time.sleep(0.05)  # polling a real condition (the log line) under a deadline
    raise AssertionError(f"server did not announce its address: {log.read_text()}")
