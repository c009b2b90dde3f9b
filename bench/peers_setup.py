"""What a run of :mod:`bench.peers` stands on, printed with its results: the machine (cores,
CPU model, load average, how fast it runs a fixed CPU-bound loop, how much of it stood idle
during each measurement), the PostgreSQL server at its stock durability with the settings it
runs under (read back with ``SHOW``), and every system's own settings.

The machine is shared, and two of its readings move the figures: a slower CPU (another VM on
the same core, a lower clock) slows every system alike, which :func:`calibrate` shows; and the
CPU left idle while a system runs, which moves some systems one way and others the other. A
consumer whose threads hand one lock to each other (huey's: one SQLite connection behind a
lock, shared by its 10 worker threads) runs ~2x faster when other work keeps the second core
busy: the thread that releases the lock takes it again before a woken waiter can run, instead
of handing it on with a context switch or several per task, as it does on an otherwise idle
machine, where the waiter wakes at once on the free core. :class:`Conditions` reads both: the
machine's idle share and the worker processes' voluntary context switches.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from dataclasses import dataclass
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


#: The calibration loop's length: ~50 ms of one core on this project's 2-core test machine.
CALIBRATION_LOOPS = 2_000_000


def calibrate(loops: int = CALIBRATION_LOOPS) -> tuple[float, float]:
    """A fixed CPU-bound loop (integer additions in Python) run here: its (CPU ms, wall ms).

    The CPU time moves with the core's speed (its clock, a neighbour on the same physical
    core); the wall time beyond it is time this process waited for a core (the machine's load).
    Timed before and after each round, it shows drift that would otherwise pass for a
    system's own."""
    cpu, wall = time.process_time(), time.perf_counter()
    total = 0
    for i in range(loops):
        total += i
    return (time.process_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3


def _cpu_jiffies() -> tuple[int, int]:
    """(idle + iowait, total) jiffies of the whole machine so far (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return fields[3] + fields[4], sum(fields)


def _children_switches() -> int:
    """Voluntary context switches of this process's reaped children so far."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw


@dataclass(frozen=True, slots=True)
class Conditions:
    """What the machine did while one measurement ran: read at :meth:`start`, closed by
    :meth:`stop`."""

    idle: int
    total: int
    switches: int

    @classmethod
    def start(cls) -> Conditions:
        """The counters now."""
        idle, total = _cpu_jiffies()
        return cls(idle, total, _children_switches())

    def stop(self) -> tuple[float, int]:
        """The share of the machine's CPU left idle since :meth:`start` (percent), and the
        voluntary context switches of the children reaped since (the worker processes: a
        drain reaps its workers and nothing else that ran)."""
        idle, total = _cpu_jiffies()
        share = 100.0 * (idle - self.idle) / (total - self.total) if total > self.total else 0.0
        return share, _children_switches() - self.switches
