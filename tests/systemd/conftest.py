"""Fixtures: fake ``NOTIFY_SOCKET`` receivers (a filesystem path and an abstract name)."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.worker.daemonkit import add_task, clean_env, leased, reap, spawn_worker, wait_for

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


_SENSITIVE_ROOTS = ("/tmp", "/var/tmp", "/home", "/root", "/run/user")


def _sensitive(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in _SENSITIVE_ROOTS)


@pytest.fixture
def stable_install(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Render units as for an unremarkable install when this checkout lives where a unit would
    be refused or adjusted (a CI clone in /tmp, a developer's clone under /home or /root).

    ``systemd-unit`` looks at where it is installed (ExecStart, ``sys.prefix``, the ``worker``
    package) and refuses /tmp or loosens ProtectHome for /home: right for operators, but it made
    every unit test depend on the checkout's location. This builds a working stand-in of the
    running virtualenv in /dev/shm (tmpfs, none of those roots): ``bin/python3`` and
    ``bin/backlog-worker`` that really run, so ``systemd-analyze verify`` and the tests that
    start what they rendered still work. Unit modules use it for every test (``pytestmark``);
    tests about placement fake their own interpreter and prefix on top of it (their
    monkeypatching comes later and wins).
    """
    import shutil
    import sys

    import worker
    import worker.cli.systemd.unit as systemd_cli

    real = [sys.prefix, str(Path(worker.__file__).resolve()), *systemd_cli.resolve_exec()[:1]]
    if not any(_sensitive(p) for p in real) or not os.access("/dev/shm", os.W_OK | os.X_OK):
        yield
        return
    root = Path(tempfile.mkdtemp(prefix="backlog-worker-install-", dir="/dev/shm"))
    root.chmod(0o755)  # open like /opt: the service user may enter it
    try:
        bindir = root / "bin"
        bindir.mkdir()
        python = bindir / "python3"
        python.symlink_to(sys.executable)
        if sys.prefix != sys.base_prefix:  # a virtualenv: the stand-in is one too, same packages
            shutil.copy(Path(sys.prefix) / "pyvenv.cfg", root / "pyvenv.cfg")
            (root / "lib").symlink_to(Path(sys.prefix) / "lib")
        script = bindir / "backlog-worker"
        script.write_text(f"#!{python}\nfrom worker.cli import main\nmain()\n")
        script.chmod(0o755)
        monkeypatch.setattr(sys, "executable", str(python))
        monkeypatch.setattr(sys, "prefix", str(root))
        monkeypatch.setattr(worker, "__file__", str(root / "src" / "worker" / "__init__.py"))
        yield
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def busy_watched_worker(
    config: Path, db: Path, receiver: NotifyReceiver
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A real ``backlog-worker run`` of ``config`` under a fake service manager (``receiver``;
    a watchdog ping asked every 0.2 s): ready, and holding one long task added to the rail
    ``db``. Yields the process and its log (beside ``config``); reaped when the block ends."""
    env = clean_env(NOTIFY_SOCKET=receiver.address, WATCHDOG_USEC="200000")
    log = config.parent / "worker.log"
    proc = spawn_worker(config, log, env=env)
    try:
        receiver.recv_until(lambda m: m.startswith("READY=1"), timeout=30)
        add_task(db, "long")
        wait_for(lambda: leased(db), 30, "the task to be claimed")
        yield proc, log
    finally:
        reap(proc)
