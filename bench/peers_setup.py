"""What a run of :mod:`bench.peers` stands on, printed with its results: the machine (cores,
CPU model, load average), the PostgreSQL server at its stock durability with the settings it
runs under (read back with ``SHOW``), and every system's own settings.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from tests.postgres.server import PgServer

#: The settings printed from the server itself (``SHOW``).
PG_SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_sync_method",
    "wal_level",
    "shared_buffers",
    "max_connections",
    "checkpoint_timeout",
    "max_wal_size",
)


class StockPgServer(PgServer):
    """The tests' server (Debian's binaries, a temp data dir, 127.0.0.1) at the stock
    durability of a fresh ``initdb``: ``fsync``, ``synchronous_commit`` and
    ``full_page_writes`` on, every other setting its default; only the address, the socket
    directory and the log are set."""

    def settings(self) -> list[str]:
        """Where it listens and logs; nothing else (see the class)."""
        return [
            "listen_addresses=127.0.0.1",
            f"unix_socket_directories={self.sockdir}",
            "logging_collector=off",
        ]


def pg_settings(server: PgServer) -> str:
    """The server's settings as it reports them (``SHOW``), one line."""
    import psycopg

    with psycopg.connect(server.url) as conn:
        shown = [
            f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
            for name in PG_SETTINGS
        ]
    return "PostgreSQL: " + ", ".join(shown) + f"; data dir on {_filesystem(server.datadir)}"


def _filesystem(path: Path) -> str:
    """The filesystem type ``path`` lives on (from ``/proc/mounts``, longest mount prefix)."""
    best = ("?", "")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fstype, *_ = line.split()
            if str(path).startswith(mount) and len(mount) > len(best[1]):
                best = (fstype, mount)
    except OSError:
        return "?"
    return f"{best[0]} ({best[1]})"


def machine() -> str:
    """Cores, CPU model, kernel and Python: one line."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"machine: {os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def load() -> str:
    """The load average (1, 5, 15 min)."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def psycopg_impl() -> str:
    """psycopg's version and libpq implementation (the PostgreSQL rail's driver)."""
    import psycopg

    libpq = psycopg.pq.version()
    return (
        f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__}, libpq {libpq // 10000}."
        f"{libpq % 100})"
    )
