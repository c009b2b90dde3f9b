"""The MCP page's blocks (docs/submit/mcp.md), read from the page and run: the generic client
config starts the server it names, the HTTP command serves (with a free port) and refuses a
client without the token, and the NullClaw role's options parse and offer the server."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from plugins.nullclaw.home import build_config
from plugins.nullclaw.options import parse_options
from tests.docs.blocks import blocks, shell_commands
from tests.mcp.kit import ok, stdio_session, wait_for_url
from tests.mcp.test_mcp_stdio import TOOLS
from tests.worker.daemonkit import TOKEN, clean_env, make_rail, serve_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PAGE = "docs/submit/mcp.md"
PAGE_RAIL = "sqlite:///var/lib/backlog/rail.db"


def _block(lang: str) -> str:
    [block] = [b for b in blocks(PAGE) if b.lang == lang and b.marker == "tested-by"]
    return block.body


async def test_the_generic_client_config_starts_the_server(tmp_path: Path) -> None:
    server = json.loads(_block("json"))["mcpServers"]["rail"]
    assert server["command"] == "backlog-worker"
    args: list[str] = server["args"]
    assert PAGE_RAIL in args
    db = make_rail(tmp_path)
    args = [f"sqlite://{db}" if a == PAGE_RAIL else a for a in args]
    # the page's command is the console script; here: the same program by this Python
    assert args[0] == "mcp"
    async with stdio_session(tmp_path / "mcp.log", *args[1:]) as mcp:
        assert {t.name for t in (await mcp.list_tools()).tools} == TOOLS
        assert (await ok(mcp, "list_tasks", pipeline="flow"))["items"] == []


def test_the_http_command_serves_behind_the_token(tmp_path: Path) -> None:
    [command] = shell_commands(_block("bash"))
    argv = shlex.split(command)
    assert argv[:4] == ["backlog-worker", "mcp", "--http", "127.0.0.1:8765"]
    with serve_tracker(tmp_path) as (rail_url, _db):
        (tmp_path / "agent.token").write_text(TOKEN + "\n")
        argv = [
            "127.0.0.1:0" if a == "127.0.0.1:8765" else rail_url if a.endswith(":7700") else a
            for a in argv
        ]
        log = tmp_path / "http.log"
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "worker", *argv[1:]],
                cwd=tmp_path,  # the page's token file is relative
                stdin=subprocess.DEVNULL,
                stderr=stderr,
                env=clean_env(),
            )
        try:
            url = wait_for_url(log, proc)
            refused = httpx.post(url, json={}, timeout=10)
            assert refused.status_code == 401
            allowed = httpx.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={
                    "Authorization": f"Bearer {TOKEN}",
                    "Accept": "application/json, text/event-stream",
                },
                timeout=10,
            )
            assert allowed.status_code != 401, allowed.text
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_the_nullclaw_role_offers_the_server_bound_to_its_task() -> None:
    role = tomllib.loads(_block("toml"))["roles"][0]
    assert role["executor"] == "nullclaw"
    options = parse_options(role["options"])
    entry = build_config(options, "task-42")["mcp_servers"]["rail"]
    assert entry["args"][:5] == ["-m", "worker", "mcp", "--task", "task-42"]
    assert (
        "--token-file" in entry["args"] and "/etc/backlog-worker/researcher.token" in entry["args"]
    )
