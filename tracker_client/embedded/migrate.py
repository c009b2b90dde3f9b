"""Opening a database file: refusing what is not ours, pragmas, the schema and its migrations.

Runs on the database thread. The checks happen before anything is written, so a file that is
not SQLite, is corrupt, belongs to another program or to a newer backlog-worker is refused with
``TrackerCorrupt`` and left exactly as it was.

``schema/schema.sql`` is the schema as it is now: a new rail (no table, version 0) is created
from it in one step and recorded at :data:`SCHEMA_VERSION`. A rail of an older version is
brought up by the numbered migrations ``schema/NNNN_name.sql`` it lacks (each a diff, kept as
written). Both paths end in the same schema (tests/embedded/test_schema.py compares them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from importlib import resources
from pathlib import Path

from tracker_client.embedded.sqlerrors import map_sqlite_error
from tracker_client.errors import TrackerCorrupt, TrackerUnavailable

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "connect", "current_schema", "migrations"]

log = logging.getLogger("backlog_worker.tracker")

#: ``PRAGMA application_id`` of a backlog-worker database: ASCII "BKLG".
APPLICATION_ID = 0x424B4C47

_SQLITE_MAGIC = b"SQLite format 3\x00"


def migrations() -> list[tuple[int, str, str]]:
    """The numbered migrations shipped in ``schema/``: (version, file name, SQL), in order."""
    found: list[tuple[int, str, str]] = []
    for entry in resources.files("tracker_client.embedded").joinpath("schema").iterdir():
        name = entry.name
        if not name.endswith(".sql"):
            continue
        number, _, _rest = name.partition("_")
        if not number.isdigit():
            continue
        found.append((int(number), name, entry.read_text(encoding="utf-8")))
    found.sort()
    for expected, (version, fname, _sql) in enumerate(found, start=1):
        if version != expected:
            raise RuntimeError(f"schema migrations are not numbered 1..n: {fname}")
    return found


#: The schema version this build writes (the highest migration number).
SCHEMA_VERSION = len(migrations())


def current_schema() -> str:
    """``schema/schema.sql``: the whole schema at :data:`SCHEMA_VERSION` (a new rail's)."""
    return (
        resources.files("tracker_client.embedded")
        .joinpath("schema", "schema.sql")
        .read_text(encoding="utf-8")
    )


def _statements(sql: str) -> list[str]:
    """Split a migration into complete statements (trigger bodies contain ``;``)."""
    out: list[str] = []
    buf = ""
    for line in sql.splitlines(keepends=True):
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        raise RuntimeError(f"incomplete statement in migration: {buf[:80]!r}")
    return out


def connect(path: str, synchronous: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open the rail file (checked first) with the tracker's pragmas; ``:memory:`` for tests."""
    memory = path == ":memory:"
    if not memory:
        _check_file(path)
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except (sqlite3.Error, OSError) as exc:
        raise map_sqlite_error(exc, f"opening {path}") from exc
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if not memory:
            _check_ours(conn, path)
            # Only a file with no table yet takes auto_vacuum (before WAL writes its header):
            # then retention's incremental_vacuum shrinks it. An older file keeps NONE.
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise TrackerUnavailable(f"{path}: could not switch to WAL (mode {mode})")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        # Checkpoints run on a separate thread (see dbthread.Checkpointer), not inside a commit.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        # After a checkpoint resets the WAL, give back disk space above 64 MiB.
        conn.execute("PRAGMA journal_size_limit = 67108864")
        _migrate(conn, path)
        # From here on Database._backoff polls for the lock itself (see there).
        conn.execute("PRAGMA busy_timeout = 0")
    except sqlite3.Error as exc:
        conn.close()
        raise map_sqlite_error(exc, f"opening {path}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _check_file(path: str) -> None:
    """Refuse a non-SQLite file before SQLite touches it; create a new file 0600."""
    p = Path(path)
    try:
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with contextlib.suppress(FileExistsError):
                fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                os.close(fd)
            return
        if p.is_dir():
            raise TrackerCorrupt(f"{path}: is a directory, not a backlog database")
        if p.stat().st_size == 0:
            # An empty file becomes a new rail: with the mode a new one gets, not its own.
            with contextlib.suppress(PermissionError):
                p.chmod(0o600)
            return
        with p.open("rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise TrackerUnavailable(f"{path}: cannot open the database file: {exc}") from exc
    if head and head != _SQLITE_MAGIC:
        raise TrackerCorrupt(f"{path}: not a SQLite database (refusing to touch it)")


def _check_ours(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a SQLite file of another application or of a newer schema, before any write."""
    try:
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = [
            str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
    except sqlite3.DatabaseError as exc:
        raise TrackerCorrupt(
            f"{path}: not a usable SQLite database ({exc}); refusing to touch it"
        ) from exc
    if app_id not in (0, APPLICATION_ID):
        raise TrackerCorrupt(
            f"{path}: a SQLite database of another application (application_id "
            f"{app_id:#x}, expected {APPLICATION_ID:#x}); refusing to touch it"
        )
    if app_id == 0 and tables:
        raise TrackerCorrupt(
            f"{path}: a SQLite database of another application (tables "
            f"{', '.join(sorted(tables)[:5])}, no backlog-worker application_id); "
            "refusing to touch it"
        )
    if version > SCHEMA_VERSION:
        raise TrackerCorrupt(
            f"{path}: written by a newer backlog-worker (schema version {version}, this build "
            f"knows up to {SCHEMA_VERSION}); upgrade backlog-worker to open it"
        )


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Create a new rail from ``schema.sql``, or apply the migrations an older one lacks; in
    one ``BEGIN IMMEDIATE`` transaction."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while we waited for the write lock: re-read.
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        if version > SCHEMA_VERSION or app_id not in (0, APPLICATION_ID):
            raise TrackerCorrupt(f"{path}: changed by another program while opening")
        if version == 0:
            _create(conn, path)
        for number, name, sql in migrations() if version else ():
            if number <= version:
                continue
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
            log.info(
                "applied schema migration %s to %s",
                name,
                path,
                extra={"action": "schema_migrated", "task_id": None, "run_id": None},
            )
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _create(conn: sqlite3.Connection, path: str) -> None:
    """Create the whole schema from ``schema.sql`` on a file with none (inside ``_migrate``'s
    transaction) and record it at :data:`SCHEMA_VERSION`."""
    for statement in _statements(current_schema()):
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    log.info(
        "created schema version %s (schema.sql) in %s",
        SCHEMA_VERSION,
        path,
        extra={"action": "schema_created", "task_id": None, "run_id": None},
    )
