"""Operator commands ask the remote client for retries; the URL's ``retry_attempts`` wins.

A real HTTP server on 127.0.0.1 answers ``/health`` and 503 to everything else; the real
``backlog-worker task list`` is pointed at it. The client itself retries only when asked: the
operator command asks for six tries (within 30 s), ``?retry_attempts=1`` asks for one.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from worker.cli import main
from worker.cli.errors import EXIT_UNREACHABLE

pytestmark = pytest.mark.timeout(60)


class Busy(BaseHTTPRequestHandler):
    """``/health`` is fine; every other request is a 503 (counted)."""

    hits: list[str]

    def do_GET(self) -> None:
        if self.path == "/health":
            body = json.dumps({"status": "ok", "version": "t"}).encode()
            status = 200
        else:
            self.hits.append(self.path)
            body = b'{"error":{"code":"unavailable","message":"busy"}}'
            status = 503
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def busy() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []
    handler = type("BusyHandler", (Busy,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize(("query", "tries"), [("", 6), ("?retry_attempts=1", 1)])
def test_an_operator_command_retries_unless_the_url_says_otherwise(
    busy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, query: str, tries: int
) -> None:
    for name in [n for n in os.environ if n.startswith("BACKLOG_WORKER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    url, hits = busy
    result = CliRunner().invoke(
        main, ["task", "list", "--tracker", url + query, "--json"], catch_exceptions=False
    )
    assert result.exit_code == EXIT_UNREACHABLE, result.output
    assert len(hits) == tries
    assert len(set(hits)) == 1  # the same call, tried again
