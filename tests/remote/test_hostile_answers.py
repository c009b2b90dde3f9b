"""A hostile tracker's answers (docs/operate/security.md): a claim answered with JSON nested
5,000 deep, or with a 200 MB body, fails that call with ``AnswerRefused`` naming the limit; the
worker (a real process) stays up, its memory bounded, and stops cleanly on SIGTERM. Against a
real HTTP server on 127.0.0.1 that speaks just enough of the NullTickets API."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

from tests.worker.daemonkit import clean_env, write_config
from tracker_client.errors import AnswerRefused, TrackerUnavailable
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.nulltickets.codec import DEFAULT_MAX_ANSWER_BYTES, MAX_ANSWER_DEPTH

DEEP = 5_000
HUGE = 200 * 1024 * 1024
_CHUNK = b"x" * (1024 * 1024)


class _Hostile(BaseHTTPRequestHandler):
    """``/health`` as a plain NullTickets; every claim answered by the server's next fate."""

    protocol_version = "HTTP/1.1"
    fates: list[str]
    claims: list[str]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.startswith("/health"):
            self._send(200, b'{"status":"ok","version":"hostile-1"}')
        else:
            self._send(200, b'{"items":[],"next_cursor":null}')

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if not self.path.startswith("/leases/claim"):
            self._send(204, b"")
            return
        fate = self.fates.pop(0) if self.fates else "none"
        self.claims.append(fate)
        if fate == "deep":
            self._send(200, b"[" * DEEP + b"]" * DEEP)
        elif fate == "huge":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(HUGE + 8))
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                self.wfile.write(b'{"a":"')
                for _ in range(HUGE // len(_CHUNK)):
                    self.wfile.write(_CHUNK)
                self.wfile.write(b'"}')
            except OSError:
                pass  # the client let go at its limit
        elif fate == "deep-error":
            self._send(500, b'{"error":' * DEEP + b"1" + b"}" * DEEP)
        else:
            self._send(204, b"")
        self.close_connection = True


@contextmanager
def hostile(fates: list[str]) -> Iterator[tuple[str, list[str]]]:
    """A hostile server on 127.0.0.1; yields (its URL, the fates served so far)."""
    claims: list[str] = []
    handler = type("Handler", (_Hostile,), {"fates": list(fates), "claims": claims})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", claims
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(60)
def test_the_client_refuses_deep_and_huge_answers_naming_the_limit() -> None:
    async def main(url: str) -> list[AnswerRefused]:
        seen = []
        tracker = RemoteTracker(url)
        try:
            for _ in range(3):
                with pytest.raises(AnswerRefused) as caught:
                    await tracker.claim("agent", "coder", 10_000)
                seen.append(caught.value)
            # A deep error body is read as an error (no RecursionError either).
            with pytest.raises(TrackerUnavailable):
                await tracker.claim("agent", "coder", 10_000)
        finally:
            await tracker.aclose()
        return seen

    with hostile(["deep", "huge", "deep", "deep-error"]) as (url, claims):
        deep, huge, _ = anyio.run(main, url)
    assert claims == ["deep", "huge", "deep", "deep-error"]
    assert deep.code == "answer_too_deep" and f"limit {MAX_ANSWER_DEPTH}" in deep.message
    assert huge.code == "answer_too_large" and str(DEFAULT_MAX_ANSWER_BYTES) in huge.message


def _peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    assert found, status
    return int(found.group(1))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_survives_hostile_claim_answers(tmp_path: Path) -> None:
    fates = ["deep", "huge", "deep", "huge"]
    with hostile(fates) as (url, claims):
        config = write_config(tmp_path, url, token=None, argv=["/bin/true"])
        log = tmp_path / "worker.log"
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "worker", "run", "--config", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=clean_env(),
            )
        try:
            # Polling a real condition (the claims the server saw) under the test's timeout.
            while len(claims) < len(fates) + 2:
                assert proc.poll() is None, log.read_text()
                threading.Event().wait(0.05)
            peak_kib = _peak_rss_kib(proc.pid)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert code == 0, text
    assert "RecursionError" not in text and "Traceback" not in text, text
    assert "deeper than" in text and f"larger than {DEFAULT_MAX_ANSWER_BYTES} bytes" in text
    # Bounded by the limit (64 MiB), not the answer (200 MB; 1.46 GB peak before).
    assert peak_kib < 400 * 1024, peak_kib
