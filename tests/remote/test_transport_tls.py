"""TLS in the NullTickets client's transport: built only for an ``https://`` tracker.

An ``ssl.SSLContext`` costs a process ~6-7 MiB of RSS (OpenSSL's context, certifi's bundle on
top), so a client of an ``http://`` tracker must never build one; an ``https://`` one still
verifies the server's certificate (a self-signed one is refused).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.needs import require_tool
from tests.remote.fixtures import wait_listening
from tracker_client.embedded.tracker import EmbeddedTracker
from tracker_client.errors import TrackerUnavailable
from tracker_client.nulltickets.client import RemoteTracker

pytestmark = pytest.mark.anyio

#: The child: counts every SSLContext made while a RemoteTracker works an http:// rail (health
#: turns keep-alive on, so both of its clients are built), then builds an https:// one.
CHILD = r"""
import json, ssl, sys
import anyio

made = []
original = ssl.SSLContext.__new__

def counting(cls, *args, **kwargs):
    made.append(cls.__name__)
    return original(cls, *args, **kwargs)

ssl.SSLContext.__new__ = counting

from tracker_client.nulltickets.client import RemoteTracker

async def main() -> None:
    tracker = RemoteTracker(sys.argv[1])
    try:
        health = await tracker.health()
        pid = await tracker.create_pipeline("tls", {
            "initial": "todo",
            "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
            "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
        })
        pipeline = await tracker.get_pipeline(pid)
        keep_alive = tracker._http.keep_alive
    finally:
        await tracker.aclose()
    over_http = len(made)
    await RemoteTracker("https://127.0.0.1:9").aclose()
    print(json.dumps({"http": over_http, "https": len(made) - over_http,
                      "keep_alive": keep_alive, "pipeline": pipeline.name,
                      "ok": health is not None}))

anyio.run(main)
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_an_http_tracker_builds_no_ssl_context(tmp_path: Path) -> None:
    """A RemoteTracker working a real ``tracker serve`` over http:// makes no SSLContext (the
    counter is proven by the https:// client made after it, which makes one)."""
    await (await EmbeddedTracker.open(str(tmp_path / "rail.db"))).aclose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "worker", "tracker", "serve", "--port", "0"]
    command += ["--tracker", f"sqlite://{tmp_path / 'rail.db'}"]
    with log.open("wb") as stderr:
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        url = wait_listening(log, server)
        child = subprocess.run(
            [sys.executable, "-c", CHILD, url],
            capture_output=True,
            text=True,
            timeout=45,
            env=env,
            check=False,
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout)
    assert seen == {"http": 0, "https": 1, "keep_alive": True, "pipeline": "tls", "ok": True}


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made by the openssl tool."""
    tool = require_tool("openssl", "apt-get install openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subject += ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        [*(tool, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"), *subject],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


@pytest.fixture
def tls_server(self_signed: tuple[Path, Path]) -> Iterator[tuple[int, list[str]]]:
    """A TLS listener on 127.0.0.1 with the self-signed certificate: answers one /health if a
    handshake ever succeeds; each handshake's failure is recorded."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*self_signed)
    listener = socket.create_server(("127.0.0.1", 0))
    failures: list[str] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # the listener was closed: the test is over
            with conn:
                try:
                    with context.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(65536)
                        body = b'{"status":"ok"}'
                        tls.sendall(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
                        )
                except (ssl.SSLError, OSError) as exc:
                    failures.append(str(exc))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], failures
    finally:
        # shutdown() wakes the thread's accept() (close() alone leaves it blocked on Linux,
        # and the join below waited out its 10 s)
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=10)
        assert not thread.is_alive()


@pytest.mark.timeout(30)
async def test_an_https_tracker_still_verifies_the_certificate(
    tls_server: tuple[int, list[str]],
) -> None:
    """A self-signed server is refused at the handshake: TrackerUnavailable naming the
    certificate, and the server's handshake never completed (nothing was answered)."""
    port, failures = tls_server
    tracker = RemoteTracker(f"https://127.0.0.1:{port}")
    try:
        with pytest.raises(TrackerUnavailable, match=r"(?i)certificate"):
            await tracker.health()
    finally:
        await tracker.aclose()
    with anyio.fail_after(10):  # the server thread records its side of the handshake
        while not failures:
            await anyio.sleep(0.01)
    assert len(failures) == 1  # its handshake never completed: no answer was sent
