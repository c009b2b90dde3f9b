"""Mapping ``sqlite3``/OS exceptions to the tracker's errors: done once, at this boundary."""

from __future__ import annotations

import sqlite3

from tracker_client.errors import (
    TrackerCorrupt,
    TrackerError,
    TrackerUnavailable,
    ValidationFailed,
)

__all__ = ["is_busy", "map_sqlite_error", "mapped"]


def mapped(exc: BaseException, where: str) -> BaseException:
    """Foreign exceptions as tracker errors (with their cause); ours and others unchanged."""
    if isinstance(exc, sqlite3.Error | OSError | OverflowError):
        err = map_sqlite_error(exc, where)
        err.__cause__ = exc
        return err
    return exc


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite saying another connection holds the lock (retry later)."""
    low = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in low or "busy" in low)


def map_sqlite_error(exc: BaseException, where: str) -> TrackerError:
    """The tracker error for a foreign exception raised while doing ``where``."""
    text = str(exc)
    low = text.lower()
    if isinstance(exc, sqlite3.InterfaceError | sqlite3.ProgrammingError | OverflowError):
        return ValidationFailed(f"{where}: invalid argument ({text})")
    if isinstance(exc, sqlite3.Error):
        if "locked" in low or "busy" in low:
            return TrackerUnavailable(f"{where}: database is busy ({text})", code="busy")
        if "malformed" in low or "not a database" in low or "corrupt" in low:
            return TrackerCorrupt(f"{where}: database file is corrupt ({text})")
        return TrackerUnavailable(f"{where}: sqlite error: {text}", code="sqlite_error")
    if isinstance(exc, OSError):
        return TrackerUnavailable(f"{where}: {exc}", code="os_error")
    return TrackerUnavailable(f"{where}: {exc!r}")
