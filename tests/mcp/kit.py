"""Helpers of the MCP server tests: the SDK's own client on a real ``backlog-worker mcp``.

* :func:`stdio_session`: the server as a subprocess on stdio (as an MCP client starts it);
* :func:`http_server`: ``backlog-worker mcp --http 127.0.0.1:0`` as a subprocess, its URL read
  from the line it prints once it listens;
* :func:`http_session`: the SDK's streamable HTTP client with a bearer token;
* :func:`ok` / :func:`refused`: a tool call's structured answer, or its error text.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.worker.daemonkit import clean_env

CLI = (sys.executable, "-m", "worker")


@contextlib.asynccontextmanager
async def stdio_session(
    log: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized client session with ``backlog-worker mcp ARGS`` (stderr to ``log``)."""
    params = StdioServerParameters(command=CLI[0], args=[*CLI[1:], "mcp", *args], env=env)
    with log.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def wait_for_url(log: Path, proc: subprocess.Popen[bytes]) -> str:
    """The endpoint URL ``mcp --http`` prints in ``log`` once it listens."""
    deadline = time.monotonic() + 30
    while True:
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+/mcp)", log.read_text())
        if found:
            return found.group(1)
        assert proc.poll() is None, f"mcp --http exited early: {log.read_text()}"
        assert time.monotonic() < deadline, f"mcp --http never listened: {log.read_text()}"
        time.sleep(0.05)  # polling a real condition (the line it prints) under a deadline


@contextlib.contextmanager
def http_server(tmp_path: Path, *args: str) -> Iterator[str]:
    """``backlog-worker mcp --http 127.0.0.1:0 ARGS``; yields its endpoint URL."""
    log = tmp_path / "mcp-http.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*CLI, "mcp", "--http", "127.0.0.1:0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=clean_env(),
        )
    try:
        yield wait_for_url(log, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    """An initialized client session over streamable HTTP, sending ``token`` as the bearer."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def ok(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """The structured answer of a tool call that must succeed (a list comes as ``result``)."""
    answer = await session.call_tool(tool, arguments)
    text = " ".join(getattr(c, "text", "") for c in answer.content)
    assert not answer.is_error, f"{tool} failed: {text}"
    data = answer.structured_content
    assert data is not None, f"{tool} answered no structured content: {text}"
    return data


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The error text of a tool call that must fail."""
    answer = await session.call_tool(tool, arguments)
    text = " ".join(getattr(c, "text", "") for c in answer.content)
    assert answer.is_error, f"{tool} should have failed, answered {answer.structured_content}"
    return text
