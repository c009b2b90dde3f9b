"""Fixtures: fake ``NOTIFY_SOCKET`` receivers (a filesystem path and an abstract name)."""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# sun_path holds 108 bytes; pytest's tmp_path can be longer for long test names.
_MAX_SUN_PATH = 100


@dataclass
class NotifyReceiver:
    """The service manager's end: a bound AF_UNIX datagram socket."""

    sock: socket.socket
    address: str  # as $NOTIFY_SOCKET spells it

    def recv(self, timeout: float = 5.0) -> str:
        """The next datagram, waiting at most ``timeout`` (a deadline, not a sleep)."""
        self.sock.settimeout(timeout)
        return self.sock.recv(65536).decode()

    def drain(self) -> list[str]:
        """Every datagram already queued, without waiting."""
        out = []
        self.sock.setblocking(False)
        try:
            while True:
                out.append(self.sock.recv(65536).decode())
        except BlockingIOError:
            return out

    def recv_until(self, predicate, timeout: float = 10.0) -> list[str]:
        """Datagrams up to and including the first one ``predicate`` accepts."""
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching notification within {timeout}s; got {seen}")
            try:
                message = self.recv(remaining)
            except TimeoutError:
                continue
            seen.append(message)
            if predicate(message):
                return seen


@pytest.fixture
def path_receiver(tmp_path: Path) -> Iterator[NotifyReceiver]:
    """A receiver bound to a socket file (in tmp_path when its path fits in sun_path)."""
    with tempfile.TemporaryDirectory(prefix="sdn-") as short:
        base = tmp_path if len(str(tmp_path)) < _MAX_SUN_PATH - 10 else Path(short)
        path = base / "notify"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(str(path))
            yield NotifyReceiver(sock, str(path))
        finally:
            sock.close()


@pytest.fixture
def abstract_receiver() -> Iterator[NotifyReceiver]:
    """A receiver bound to a unique Linux abstract socket (``@name`` in $NOTIFY_SOCKET)."""
    name = f"backlog-worker-test-{os.getpid()}-{secrets.token_hex(6)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind("\0" + name)
        yield NotifyReceiver(sock, "@" + name)
    finally:
        sock.close()
