"""Backups of an embedded rail that restore: ``rail backup``, ``rail verify``, ``rail restore``.

* :func:`backup_file` copies a live rail with SQLite's online backup API in one step: the copy
  is the rail as of one moment (one read transaction), while workers keep writing beside it
  (WAL). The copy is written beside its destination, checked, made durable, then renamed into
  place, so a destination file is always a whole backup. It is a single file (no WAL), mode
  0600, without the rail's secret key (a restored rail makes its own, as a copied one does).
* :func:`verify_file` opens a file read-only and checks it: ours and not newer than this build,
  SQLite's ``integrity_check`` and ``foreign_key_check``, then the rail's own invariants
  (:mod:`tracker_client.rules.verify`).
* :func:`restore_file` puts a verified backup in place of a rail whose workers are stopped (the
  rail's worker registry must show none alive): leases that were live in the backup come back
  expired, so the next claim reclaims their tasks (nothing lost, nothing run twice), and the
  rail that was there is kept beside it, renamed, with its WAL.

See docs/operate/backups-retention.md.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracker_client.embedded.engine import STATEMENTS
from tracker_client.embedded.migrate import APPLICATION_ID, SCHEMA_VERSION
from tracker_client.embedded.sqlerrors import map_sqlite_error
from tracker_client.errors import ConfigError, TrackerCorrupt, TrackerUnavailable
from tracker_client.rules.verify import VerifyReport, check_invariants, count_rows

__all__ = [
    "BackupReport",
    "RestoreReport",
    "WorkersAlive",
    "backup_file",
    "backup_name",
    "restore_file",
    "verify_file",
]

_SQLITE_MAGIC = b"SQLite format 3\x00"


class WorkersAlive(ConfigError):
    """A restore was refused: the rail's worker registry shows workers still alive."""


@dataclass(frozen=True)
class BackupReport:
    """A backup made: where, how big, and what its verification found."""

    source: str
    destination: str
    size_bytes: int
    seconds: float
    verified: VerifyReport


@dataclass(frozen=True)
class RestoreReport:
    """A restore done: the backup, the rail it became, and what was kept aside."""

    backup: str
    target: str
    kept_aside: str | None
    expired_leases: int
    verified: VerifyReport


def backup_name(now: float | None = None) -> str:
    """The file name a backup gets inside a destination directory (UTC, sortable)."""
    return time.strftime("rail-%Y%m%dT%H%M%SZ.db", time.gmtime(now))


def _open(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """A connection to an existing rail file that was checked to be SQLite first."""
    try:
        if not path.is_file():
            raise ConfigError(f"{path}: no such rail file")
        with path.open("rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise TrackerUnavailable(f"{path}: cannot open: {exc}") from exc
    if head != _SQLITE_MAGIC:
        raise TrackerCorrupt(f"{path}: not a SQLite database")
    uri = f"{path.resolve().as_uri()}?mode={'ro' if readonly else 'rw'}"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 5000")
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, f"opening {path}") from exc
    return conn


def _schema_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version, after refusing one that is not a rail or is newer."""
    try:
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        raise TrackerCorrupt(f"{path}: not a usable SQLite database ({exc})") from exc
    if app_id != APPLICATION_ID:
        raise TrackerCorrupt(
            f"{path}: not a backlog-worker rail (application_id {app_id:#x}, expected "
            f"{APPLICATION_ID:#x})"
        )
    if version > SCHEMA_VERSION:
        raise TrackerCorrupt(
            f"{path}: written by a newer backlog-worker (schema version {version}, this build "
            f"knows up to {SCHEMA_VERSION}); verify and restore it with that version"
        )
    return version


def _rows(conn: sqlite3.Connection, name: str) -> Sequence[Sequence[Any]]:
    rows: list[Any] = conn.execute(STATEMENTS[name]).fetchall()
    return rows


def _verify(conn: sqlite3.Connection, path: Path) -> VerifyReport:
    report = VerifyReport(rail=str(path), schema_version=_schema_version(conn, path))
    try:
        integrity = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        if integrity != ["ok"]:
            report.problems += [f"integrity_check: {line}" for line in integrity[:10]]
            return report  # the invariants' queries can't be trusted on a damaged file
        keys = conn.execute("PRAGMA foreign_key_check").fetchall()
        report.problems += [f"foreign_key_check: table {r[0]} row {r[1]}" for r in keys[:10]]
        report.counts = count_rows(lambda name: _rows(conn, name))
        report.problems += check_invariants(lambda name: _rows(conn, name))
    except sqlite3.DatabaseError as exc:
        report.problems.append(f"the file could not be read whole: {exc}")
    return report


def verify_file(path: str | Path) -> VerifyReport:
    """Check the rail file at ``path`` without writing to it (see the module docstring)."""
    file = Path(path)
    conn = _open(file, readonly=True)
    try:
        return _verify(conn, file)
    finally:
        conn.close()


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _copy(source: sqlite3.Connection, partial: Path) -> None:
    """``source`` into the new file ``partial`` (0600) in one backup step, as one file."""
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    target = sqlite3.connect(partial, isolation_level=None)
    try:
        # pages=-1: the whole file in one step, inside one read transaction of the source: a
        # snapshot of one moment, however much the workers write meanwhile (WAL).
        source.backup(target, pages=-1)
        target.execute("PRAGMA journal_mode = DELETE")
        target.execute("DELETE FROM rail_secrets")
    finally:
        target.close()
    with partial.open("rb") as fh:
        os.fsync(fh.fileno())


def backup_file(
    source: str | Path, destination: str | Path, *, force: bool = False
) -> BackupReport:
    """Copy the live rail at ``source`` to ``destination`` (a file, or a directory to put a
    dated file in), verified; an existing destination file is refused unless ``force``."""
    src = Path(source)
    dest = Path(destination)
    if dest.is_dir():
        dest = dest / backup_name()
    if dest.exists() and not force:
        raise ConfigError(f"{dest}: exists already (pass --force to replace it)")
    if not dest.parent.is_dir():
        raise ConfigError(f"{dest.parent}: no such directory for the backup")
    if dest.resolve() == src.resolve():
        raise ConfigError(f"{dest}: is the rail itself; back it up somewhere else")
    started = time.monotonic()
    conn = _open(src, readonly=False)
    partial = dest.with_name(dest.name + ".partial")
    try:
        _schema_version(conn, src)
        partial.unlink(missing_ok=True)
        try:
            _copy(conn, partial)
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, f"backing up {src} to {dest}") from exc
        verified = verify_file(partial)
        if not verified.ok:
            raise TrackerCorrupt(
                f"{src}: the backup does not verify (the rail itself is damaged; nothing was "
                "written to " + str(dest) + "): " + "; ".join(verified.problems)
            )
        os.replace(partial, dest)
        _fsync_dir(dest.parent)
    except OSError as exc:
        raise TrackerUnavailable(f"backing up {src} to {dest}: {exc}") from exc
    finally:
        conn.close()
        partial.unlink(missing_ok=True)
    verified.rail = str(dest)
    return BackupReport(
        source=str(src),
        destination=str(dest),
        size_bytes=dest.stat().st_size,
        seconds=time.monotonic() - started,
        verified=verified,
    )


def live_workers(path: Path, now_ms: int) -> list[str]:
    """``host:pid (id)`` of each worker the rail at ``path`` still counts alive."""
    conn = _open(path, readonly=True)
    try:
        _schema_version(conn, path)
        rows = conn.execute(STATEMENTS["verify.live_workers"], (now_ms,)).fetchall()
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, f"reading the worker registry of {path}") from exc
    finally:
        conn.close()
    return [f"{host}:{pid} ({ident})" for ident, host, pid in rows]


def _move_aside(target: Path, stamp: str) -> Path:
    """Rename ``target`` and its WAL/shared-memory files with one suffix; the new name."""
    aside = target.with_name(f"{target.name}.before-restore-{stamp}")
    for suffix in ("-wal", "-shm"):
        companion = target.with_name(target.name + suffix)
        if companion.exists():
            os.replace(companion, aside.with_name(aside.name + suffix))
    os.replace(target, aside)
    return aside


def restore_file(
    backup: str | Path, target: str | Path, *, now_ms: int | None = None
) -> RestoreReport:
    """Put the verified ``backup`` in place as the rail at ``target`` (its workers stopped)."""
    src = Path(backup)
    dest = Path(target)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    verified = verify_file(src)
    if not verified.ok:
        raise TrackerCorrupt(
            f"{src}: refusing to restore a backup that does not verify: "
            + "; ".join(verified.problems)
        )
    if dest.exists():
        alive = live_workers(dest, now)
        if alive:
            raise WorkersAlive(
                f"{dest}: {len(alive)} worker(s) still alive on this rail ("
                + ", ".join(alive[:5])
                + "): stop every worker and `tracker serve` of this rail first (a worker that"
                " died counts as gone once its lost_after passes)"
            )
    partial = dest.with_name(dest.name + ".restoring")
    partial.unlink(missing_ok=True)
    source = _open(src, readonly=True)
    try:
        fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        copy = sqlite3.connect(partial, isolation_level=None)
        try:
            source.backup(copy, pages=-1)
            copy.execute("BEGIN IMMEDIATE")
            expired = copy.execute(STATEMENTS["verify.expire_leases"]).rowcount
            copy.execute(STATEMENTS["verify.forget_workers"])
            copy.execute("COMMIT")
            copy.execute("PRAGMA journal_mode = WAL")
        finally:
            copy.close()
        with partial.open("rb") as fh:
            os.fsync(fh.fileno())
        aside_name: str | None = None
        if dest.exists():
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now / 1000))
            aside_name = str(_move_aside(dest, stamp))
        os.replace(partial, dest)
        _fsync_dir(dest.parent)
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, f"restoring {src} to {dest}") from exc
    except OSError as exc:
        raise TrackerUnavailable(f"restoring {src} to {dest}: {exc}") from exc
    finally:
        source.close()
        partial.unlink(missing_ok=True)
    return RestoreReport(
        backup=str(src),
        target=str(dest),
        kept_aside=aside_name,
        expired_leases=max(expired, 0),
        verified=verify_file(dest),
    )
