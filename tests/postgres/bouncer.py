"""A real PgBouncer (Debian's 1.18) in transaction pooling mode in front of the test server.

Started as a process on a free 127.0.0.1 port with its ini and userlist in a temp dir
(``auth_type = trust``: the test server trusts 127.0.0.1 too), ready once a connection through
it answers, stopped by pid (SIGINT: its fast shutdown). PgBouncer refuses to run as root: as
root it runs as the same user as the server (``subprocess``'s ``user=``), the temp dir chowned.

Without the binary a test skips with how to install it (``apt-get install pgbouncer``); with
``CI=true`` it fails instead (``.ci/run`` installs the package when it is missing).
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.needs import missing
from tests.postgres.server import SUPERUSER, PgServer, _free_port, _run_as

__all__ = ["BINARY", "DEFAULT_INI", "Bouncer", "start_bouncer"]

BINARY = Path("/usr/sbin/pgbouncer")
INSTALL_HINT = "PgBouncer is not installed: apt-get install pgbouncer"
START_DEADLINE_S = 30.0
#: The tests' PgBouncer: every database name to the test server, transaction pooling.
DEFAULT_INI = """\
[databases]
* = host=db.internal port=5432

[pgbouncer]
pool_mode = transaction
default_pool_size = 20
max_client_conn = 500
"""


@dataclass
class Bouncer:
    """One PgBouncer process: its port, its temp dir and the server it pools."""

    server: PgServer
    root: Path
    port: int
    proc: subprocess.Popen[bytes]

    def url_of(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL of ``database`` (a name in its ini) through the bouncer."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    @property
    def url(self) -> str:
        """A ``postgresql://`` URL of the ``postgres`` database through the bouncer."""
        return self.url_of()

    def transactions(self, database: str = "postgres") -> int:
        """How many transactions the bouncer has pooled for ``database`` (its admin console's
        ``SHOW STATS``, which speaks only the simple query protocol)."""
        import psycopg

        admin = f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/pgbouncer"
        with psycopg.connect(admin, autocommit=True) as conn:
            res = conn.pgconn.exec_(b"SHOW STATS")
            names = [res.fname(i) for i in range(res.nfields)]
            col = names.index(b"total_xact_count")
            for row in range(res.ntuples):
                if res.get_value(row, 0) == database.encode():
                    return int(res.get_value(row, col) or b"0")
        return 0

    def log_tail(self) -> str:
        """The end of its log (for error messages)."""
        try:
            return (self.root / "bouncer.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGINT by pid (its fast shutdown), SIGKILL if it does not go in time; the temp dir
        goes. Idempotent."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        shutil.rmtree(self.root, ignore_errors=True)


def start_bouncer(server: PgServer, base: str = DEFAULT_INI) -> Bouncer:
    """Start PgBouncer in front of ``server`` with the settings of ``base`` (an ini text:
    :data:`DEFAULT_INI`, or a page's example), its addresses, auth and log replaced by the test's
    own; wait until a connection through it answers."""
    if not BINARY.is_file():
        missing(INSTALL_HINT)
    import psycopg

    root = Path(tempfile.mkdtemp(prefix="backlog-bouncer-"))
    port = _free_port()
    (root / "userlist.txt").write_text(f'"{SUPERUSER}" ""\n')
    ini = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    ini.optionxform = str  # type: ignore[assignment,method-assign]
    ini.read_string(base)
    for name, value in ini["databases"].items():  # the test server, its postgres database
        value = re.sub(r"\bhost=\S+", "host=127.0.0.1", value)
        value = re.sub(r"\bport=\S+", f"port={server.port}", value)
        ini["databases"][name] = re.sub(r"\bdbname=\S+", "dbname=postgres", value)
    ini["pgbouncer"].update(
        {
            "listen_addr": "127.0.0.1",
            "listen_port": str(port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(root / "userlist.txt"),
            "admin_users": SUPERUSER,
            "logfile": str(root / "bouncer.log"),
        }
    )
    with (root / "pgbouncer.ini").open("w") as out:
        ini.write(out)
    probe = next(iter(ini["databases"]))
    probe = "postgres" if probe == "*" else probe
    who = _run_as()
    extra: dict[str, Any] = {}
    if who is not None:
        for path in (root, root / "userlist.txt", root / "pgbouncer.ini"):
            os.chown(path, *who)
        extra = {"user": who[0], "group": who[1], "extra_groups": []}
    proc = subprocess.Popen(  # a fixed argv, no shell
        [str(BINARY), str(root / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **extra,
    )
    bouncer = Bouncer(server=server, root=root, port=port, proc=proc)
    deadline = time.monotonic() + START_DEADLINE_S
    while True:
        if proc.poll() is not None:
            tail = bouncer.log_tail()
            bouncer.stop()
            raise RuntimeError(f"pgbouncer exited ({proc.returncode}): {tail}")
        try:
            with psycopg.connect(bouncer.url_of(probe), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return bouncer
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                bouncer.stop()
                raise RuntimeError(f"pgbouncer not ready in time: {bouncer.log_tail()}") from None
            time.sleep(0.05)  # the next connection attempt (readiness is the connection)
