"""Opening a database file: refusing what is not ours, pragmas, the schema and its migrations.

Runs on the database thread. The checks happen before anything is written, so a file that is
not SQLite, is corrupt, belongs to another program or to a newer backlog-worker is refused with
``TrackerCorrupt`` and left exactly as it was.

``schema/schema.sql`` is the schema as it is now: a new rail (no table, version 0) is created
from it in one step. A rail of an older version is brought up by the numbered migrations
``schema/NNNN_name.sql`` it lacks (each a diff, kept as written). Both paths end in the same
schema (tests/embedded/test_schema.py compares them).

The compatibility window (:mod:`tracker_client.rules.upgrades`): ``PRAGMA user_version`` holds
the rail's *level* (its highest migration that is not additive; the previous release refuses a
level above its own), and the table ``schema_additions`` the additive migrations applied above
it. Additive migrations are applied at open; one that raises the level past
:data:`PREVIOUS_RELEASE_LEVEL` waits for ``backlog-worker rail migrate``.

An open of a current rail (every migration of this build applied, recorded by a build that
knows the window) reads no migration file and plans nothing
(:func:`tracker_client.rules.migration_files.current`): the files are read, and :data:`LEVEL`
computed, only when a rail is behind or created (~10 M instructions of a worker's start-up,
``python -m bench.startup``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker_client.embedded.sqlerrors import map_sqlite_error
from tracker_client.errors import TrackerCorrupt, TrackerRejected, TrackerUnavailable
from tracker_client.rules import migration_files

if TYPE_CHECKING:  # imported where a rail is planned: an open of a current one plans nothing
    from tracker_client.rules.upgrades import Migration, Plan

__all__ = [
    "APPLICATION_ID",
    "CACHE_KIB",
    "LEVEL",
    "PREVIOUS_RELEASE_LEVEL",
    "SCHEMA_VERSION",
    "connect",
    "current_schema",
    "migrate_file",
    "migrations",
    "other_versions_alive",
    "recorded",
]

log = logging.getLogger("backlog_worker.tracker")

#: ``PRAGMA application_id`` of a backlog-worker database: ASCII "BKLG".
APPLICATION_ID = 0x424B4C47

_SQLITE_MAGIC = b"SQLite format 3\x00"
#: The connection's page cache, KiB (SQLite's default is 2,000). The pages a rail reads again are
#: few (the claim's index pages, the free tasks); the rest of a busy file is written once and
#: stays cached for nothing: with SQLite's default a worker's page cache grew to its 2 MiB in a
#: 5,000-task drain, with 512 KiB it peaked 1.6-2.2 MiB lower at the same tasks/s and CPU per
#: task (100,000 finished tasks kept, and through ``tracker serve``; docs/benchmarks.md,
#: memory footprint). Pages it evicts are in the operating system's cache.
CACHE_KIB = 512


_SHIPPED = migration_files.Shipped("tracker_client.embedded", globals())


def migrations() -> list[tuple[int, str, str]]:
    """The numbered migrations shipped in ``schema/``: (version, file name, SQL), in order."""
    return _SHIPPED.migrations()


#: The highest migration this build knows (from the files' names).
SCHEMA_VERSION = len(migration_files.numbered_files("tracker_client.embedded"))
#: The level of the previous release (0.1.0: migrations 1-7): a migration at or below it is one
#: the previous release has, so applying it at open locks no worker of the window out.
PREVIOUS_RELEASE_LEVEL = 7
#: The level a rail of this build's full schema has (its highest non-additive migration); read
#: from the files on first use, as is ``_MIGRATIONS`` (this build's migrations).
LEVEL: int
_MIGRATIONS: list[Migration]


def __getattr__(name: str) -> Any:
    """:data:`LEVEL` and ``_MIGRATIONS``, from the migration files on first use (:pep:`562`)."""
    return _SHIPPED.attribute(name)


def _shipped() -> list[Migration]:
    """``_MIGRATIONS`` (as a test may have set it), read on first use."""
    return _SHIPPED.shipped()


def recorded(conn: sqlite3.Connection) -> tuple[int, set[int]]:
    """The rail's level and additive migrations applied above it."""
    level = int(conn.execute("PRAGMA user_version").fetchone()[0])
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_additions'"
    ).fetchone()
    if found is None:
        return level, set()
    return level, {int(r[0]) for r in conn.execute("SELECT version FROM schema_additions")}


def _record(conn: sqlite3.Connection, level: int, additions: frozenset[int]) -> None:
    """Write the level and the additions (inside the caller's write transaction)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_additions "
        "(version INTEGER PRIMARY KEY, name TEXT NOT NULL) WITHOUT ROWID"
    )
    conn.execute("DELETE FROM schema_additions")
    names = {m.number: m.name for m in _shipped()}
    conn.executemany(
        "INSERT INTO schema_additions (version, name) VALUES (?, ?)",
        [(n, names.get(n, "?")) for n in sorted(additions)],
    )
    conn.execute(f"PRAGMA user_version = {int(level)}")


def _needs_migrate(path: str, pending: Plan) -> TrackerRejected:
    first = pending.explicit[0]
    return TrackerRejected(
        f"{path}: migration {first.name} changes the schema in a way the previous release can't"
        " read; stop the workers still on other versions, then run `backlog-worker rail migrate"
        f" --tracker sqlite:///{path}` (docs/operate/upgrades.md)",
        code="schema_behind",
    )


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
        # Room for the batch statements' texts, one per batch size (rules/common.py
        # Ctx.many, hint ``values``), beside the other statements (the default keeps 128).
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, cached_statements=256
        )
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
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
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


def _plan(conn: sqlite3.Connection, explicit_step: bool) -> tuple[int, set[int], Plan]:
    from tracker_client.rules.upgrades import plan

    level, additions = recorded(conn)
    pending = plan(
        _shipped(), level, additions, PREVIOUS_RELEASE_LEVEL, explicit_step=explicit_step
    )
    return level, additions, pending


def _migrate(conn: sqlite3.Connection, path: str, *, explicit_step: bool = False) -> int:
    """Create a new rail from ``schema.sql``, or apply the migrations an older one lacks that
    the window allows at open (all of them for ``rail migrate``: ``explicit_step``), in one
    ``BEGIN IMMEDIATE`` transaction; how many were applied. A migration left to ``rail
    migrate`` is ``TrackerRejected`` (``schema_behind``) after the others are in."""
    if migration_files.current(*recorded(conn), SCHEMA_VERSION):
        return 0
    from tracker_client.rules.upgrades import plan

    level, additions, pending = _plan(conn, explicit_step)
    if level and not pending.now and not pending.records_change(level, additions):
        if pending.explicit:
            raise _needs_migrate(path, pending)
        return 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while we waited for the write lock: re-read.
        level, additions, pending = _plan(conn, explicit_step)
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        if level > SCHEMA_VERSION or app_id not in (0, APPLICATION_ID):
            raise TrackerCorrupt(f"{path}: changed by another program while opening")
        if level == 0:
            _create(conn, path)
            pending = plan(_shipped(), SCHEMA_VERSION, (), PREVIOUS_RELEASE_LEVEL)
            applied = 0
        else:
            for migration in pending.now:
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                log.info(
                    "applied schema migration %s to %s",
                    migration.name,
                    path,
                    extra={"action": "schema_migrated", "task_id": None, "run_id": None},
                )
            applied = len(pending.now)
        _record(conn, pending.level, pending.additions)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    if pending.explicit:
        raise _needs_migrate(path, pending)
    return applied


def _create(conn: sqlite3.Connection, path: str) -> None:
    """Create the whole schema from ``schema.sql`` on a file with none (inside ``_migrate``'s
    transaction) and record it at :data:`SCHEMA_VERSION`."""
    for statement in _statements(current_schema()):
        conn.execute(statement)
    log.info(
        "created schema version %s (schema.sql) in %s",
        SCHEMA_VERSION,
        path,
        extra={"action": "schema_created", "task_id": None, "run_id": None},
    )


def other_versions_alive(conn: sqlite3.Connection, version: str, now_ms: int) -> list[str]:
    """``host:pid (version)`` of each worker the rail's registry shows alive on a version other
    than ``version`` (none on a rail without a registry yet)."""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workers'"
    ).fetchone()
    if found is None:
        return []
    rows = conn.execute(
        "SELECT host, pid, version FROM workers WHERE stopping = 0 "
        "AND last_seen_at_ms + lost_after_ms > ? AND version <> ? ORDER BY registered_at_ms",
        (now_ms, version),
    ).fetchall()
    return [f"{host}:{pid} ({ver})" for host, pid, ver in rows]


def migrate_file(path: str, version: str, now_ms: int) -> tuple[int, int]:
    """``backlog-worker rail migrate`` on an embedded rail: every migration it lacks, those that
    raise its level past the previous release's included, once no worker on another version
    (``version`` is this build's) is alive in its registry; (highest migration before, after)."""
    if not Path(path).is_file():
        raise TrackerRejected(f"{path}: no rail file to migrate", code="not_found")
    conn = connect_plain(path)
    try:
        _check_ours(conn, path)
        level, additions = recorded(conn)
        before = max([level, *additions])
        from tracker_client.rules.upgrades import plan

        pending = plan(_shipped(), level, additions, PREVIOUS_RELEASE_LEVEL, explicit_step=True)
        if pending.now and any(not m.additive for m in pending.now):
            alive = other_versions_alive(conn, version, now_ms)
            if alive:
                raise TrackerRejected(
                    f"{path}: {len(alive)} worker(s) on other versions are still alive ("
                    + ", ".join(alive[:5])
                    + "); the migration would lock them out: stop or upgrade them first",
                    code="workers_alive",
                )
        _migrate(conn, path, explicit_step=True)
        level, additions = recorded(conn)
        return before, max([level, *additions])
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, f"migrating {path}") from exc
    finally:
        conn.close()


def connect_plain(path: str) -> sqlite3.Connection:
    """A connection to the rail file for the one-off commands (no pragmas of the tracker's)."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    except (sqlite3.Error, OSError) as exc:
        raise map_sqlite_error(exc, f"opening {path}") from exc
    conn.row_factory = sqlite3.Row
    return conn
