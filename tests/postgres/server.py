"""A real PostgreSQL server for tests: Debian's binaries, a temp data dir, a free 127.0.0.1 port.

:func:`shared_server` starts one server per test process (lazily, the first time a test needs
it) and stops it by pid when the process exits; every test then gets a fresh schema of its own
(:func:`fresh_schema_url`), which costs a ``CREATE SCHEMA`` and the migrations instead of a
server or a database.

``initdb`` and ``postgres`` refuse to run as root: as root they run as the ``postgres`` user
Debian's package creates (else ``nobody``) through ``subprocess``'s ``user=``/``group=``, with the
temp dir chowned to that user. Durability is off (``fsync=off``, ``synchronous_commit=off``): the
data dir is thrown away, and the tests measure behaviour, not disks.

Without the binaries a test skips with how to install them (``apt-get install postgresql``);
with ``CI=true`` it fails instead: CI must run the PostgreSQL tests (``.ci/run`` installs the
package when it is missing).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from tests.needs import missing

__all__ = ["PgServer", "find_bindir", "fresh_schema_url", "require_postgres", "shared_server"]

INSTALL_HINT = "PostgreSQL is not installed: apt-get install postgresql (Debian's server binaries)"
PSYCOPG_HINT = "psycopg is not installed: pip install -e '.[postgres]'"
#: The superuser initdb creates (tests connect as it over trust auth on 127.0.0.1).
SUPERUSER = "backlog"
START_DEADLINE_S = 60.0


def find_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<ver>/bin`` holding ``initdb`` and ``postgres``."""
    root = Path(os.environ.get("BACKLOG_PG_ROOT", "/usr/lib/postgresql"))
    found: list[tuple[int, Path]] = []
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            bindir = entry / "bin"
            tools = (bindir / "initdb").is_file() and (bindir / "postgres").is_file()
            if entry.name.isdigit() and tools:
                found.append((int(entry.name), bindir))
    return max(found)[1] if found else None


def require_postgres() -> Path:
    """The binaries' directory, after checking psycopg is importable; else skip (fail in CI)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        missing(PSYCOPG_HINT)
    bindir = find_bindir()
    if bindir is None:
        missing(INSTALL_HINT)
    assert bindir is not None
    return bindir


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) to run the server as: None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    raise RuntimeError("running as root and there is neither a postgres nor a nobody user")


@dataclass
class PgServer:
    """One PostgreSQL server in a temp dir: start, stop (by pid), restart on the same port."""

    bindir: Path
    root: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def datadir(self) -> Path:
        """The cluster's data directory."""
        return self.root / "data"

    @property
    def sockdir(self) -> Path:
        """The server's unix-socket directory (kept out of /var/run)."""
        return self.root / "sock"

    @property
    def url(self) -> str:
        """A ``postgresql://`` URL of the ``postgres`` database on 127.0.0.1."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def _user_args(self) -> dict[str, Any]:
        who = _run_as()
        return {} if who is None else {"user": who[0], "group": who[1], "extra_groups": []}

    @classmethod
    def create(cls, bindir: Path) -> Self:
        """``initdb`` a fresh cluster in a new temp dir (owned by the server's user)."""
        root = Path(tempfile.mkdtemp(prefix="backlog-pg-"))
        server = cls(bindir=bindir, root=root)
        server.sockdir.mkdir()
        who = _run_as()
        if who is not None:
            for path in (root, server.sockdir):
                os.chown(path, *who)
        argv = [str(bindir / "initdb"), "-D", str(server.datadir), "-U", SUPERUSER]
        argv += ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"]
        done = subprocess.run(argv, capture_output=True, check=False, **server._user_args())
        if done.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
        return server

    def settings(self) -> list[str]:
        """The server's ``-c`` settings: 127.0.0.1 and its own socket directory, durability off
        (a subclass may keep the stock durability: ``bench.peers`` does)."""
        return [
            "listen_addresses=127.0.0.1",
            f"unix_socket_directories={self.sockdir}",
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=200",
            "shared_buffers=32MB",
            "logging_collector=off",
        ]

    def start(self) -> None:
        """Start ``postgres`` on a free port (the same one again after :meth:`stop`)."""
        if self.port == 0:
            self.port = _free_port()
        argv = [str(self.bindir / "postgres"), "-D", str(self.datadir), "-p", str(self.port)]
        for setting in self.settings():
            argv += ["-c", setting]
        log = (self.root / "server.log").open("ab")
        try:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, **self._user_args()
            )
        finally:
            log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited ({self.proc.returncode}): {self.log_tail()}")
            try:
                with psycopg.connect(self.url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres not ready in time: {self.log_tail()}") from None
                time.sleep(0.05)

    def log_tail(self) -> str:
        """The end of the server's log (for error messages)."""
        with contextlib.suppress(OSError):
            return (self.root / "server.log").read_text(errors="replace")[-2000:]
        return ""

    def stop(self) -> None:
        """Fast shutdown by pid (SIGINT), SIGKILL if it does not go in time. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def restart(self) -> None:
        """Stop and start again on the same port and data (a rail that survives a restart)."""
        self.stop()
        self.start()

    def destroy(self) -> None:
        """Stop and remove the temp dir."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


_lock = threading.Lock()
_shared: PgServer | None = None


def shared_server() -> PgServer:
    """The one server of this test process (started on first use, stopped at exit)."""
    global _shared
    bindir = require_postgres()
    with _lock:
        if _shared is None:
            server = PgServer.create(bindir)
            try:
                server.start()
            except BaseException:
                server.destroy()
                raise
            atexit.register(server.destroy)
            _shared = server
        return _shared


def schema_name(key: str) -> str:
    """A schema name for ``key`` (the same key, the same schema: two instances, one rail)."""
    import hashlib

    return "t_" + hashlib.sha256(key.encode()).hexdigest()[:20]


def fresh_schema_url(key: str, **options: Any) -> str:
    """A ``postgresql://`` URL of the shared server naming the schema of ``key``."""
    server = shared_server()
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema_name(key), **options}.items())
    return f"{server.url}?{query}"


@dataclass
class StatsServer(PgServer):
    """A server of a test module's own with ``pg_stat_statements`` loaded and counting nested
    statements too, plus the module's ``extra`` settings (JIT thresholds, planning counts)."""

    extra: tuple[str, ...] = ()

    def settings(self) -> list[str]:
        """The tests' settings, the statements' extension and :attr:`extra`."""
        return [
            *super().settings(),
            "shared_preload_libraries=pg_stat_statements",
            "pg_stat_statements.track=all",
            *self.extra,
        ]


@contextlib.contextmanager
def stats_server(*extra: str, needs: tuple[str, ...] = ()) -> Iterator[PgServer]:
    """A started :class:`StatsServer` with the extension created, destroyed after; skips when
    ``pg_stat_statements`` or a library of ``needs`` (PostgreSQL's contrib modules) is missing."""
    import psycopg

    bindir = require_postgres()
    libdir = bindir.parent / "lib"
    for library in ("pg_stat_statements", *needs):
        if not (libdir / f"{library}.so").is_file():
            missing(f"{library}.so is not in {libdir} (PostgreSQL's contrib modules)")
    server = StatsServer.create(bindir)
    server.extra = extra
    try:
        server.start()
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        yield server
    finally:
        server.destroy()
