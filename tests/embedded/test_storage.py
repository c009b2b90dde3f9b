"""The embedded tracker's file: migrations, refusing foreign/corrupt/newer files untouched, file
mode, WAL, and a locked database mapped to ``TrackerUnavailable``."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tracker_client.embedded import EmbeddedTracker
from tracker_client.embedded.migrate import (
    APPLICATION_ID,
    LEVEL,
    SCHEMA_VERSION,
    _statements,
    migrations,
)
from tracker_client.errors import TrackerCorrupt, TrackerUnavailable
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.anyio

PIPE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


def _fingerprint(path: Path) -> tuple[str, int, list[str]]:
    """Content hash, mtime and the directory listing: all must be unchanged after a refusal."""
    data = path.read_bytes()
    return (
        hashlib.sha256(data).hexdigest(),
        path.stat().st_mtime_ns,
        sorted(os.listdir(path.parent)),
    )


def test_migrations_are_numbered_from_one_and_split_into_statements() -> None:
    found = migrations()
    assert [n for n, _name, _sql in found] == list(range(1, SCHEMA_VERSION + 1))
    statements = _statements(found[0][2])
    # trigger bodies contain ';' and must stay one statement each
    triggers = [s for s in statements if s.upper().startswith("CREATE TRIGGER")]
    assert len(triggers) == 3
    assert all(s.rstrip().upper().endswith("END;") for s in triggers)


async def test_new_file_gets_our_ids_wal_and_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "rail.db"
    tracker = await EmbeddedTracker.open(str(path))
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
            assert conn.execute("PRAGMA user_version").fetchone()[0] == LEVEL
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            conn.close()
        for name in ("rail.db", "rail.db-wal", "rail.db-shm"):
            mode = stat.S_IMODE((path.parent / name).stat().st_mode)
            assert mode == 0o600, f"{name} has mode {oct(mode)}"
    finally:
        await tracker.aclose()


async def test_reopen_keeps_data_and_does_not_migrate_again(tmp_path: Path) -> None:
    path = str(tmp_path / "rail.db")
    tracker = await EmbeddedTracker.open(path)
    pid = await tracker.create_pipeline("p", PIPE)
    tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="kept"))
    await tracker.aclose()
    tracker = await EmbeddedTracker.open(path)
    try:
        assert (await tracker.get_task(tid)).title == "kept"
    finally:
        await tracker.aclose()


async def test_empty_file_of_ours_at_version_zero_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.close()
    tracker = await EmbeddedTracker.open(str(path))
    try:
        assert (await tracker.health()).status == "ok"
    finally:
        await tracker.aclose()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == LEVEL
    conn.close()


@pytest.mark.parametrize(
    "content",
    [b"hello, I am a text file\n", b"\x00" * 4096, os.urandom(8192)],
    ids=["text", "zeros", "random"],
)
async def test_non_sqlite_file_is_refused_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "rail.db"
    path.write_bytes(content)
    before = _fingerprint(path)
    with pytest.raises(TrackerCorrupt, match="not a SQLite database"):
        await EmbeddedTracker.open(str(path))
    assert _fingerprint(path) == before


async def test_corrupt_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE x (a)")
    conn.commit()
    conn.close()
    data = bytearray(path.read_bytes())
    data[100:] = os.urandom(len(data) - 100)  # keep the header magic, wreck the pages
    path.write_bytes(bytes(data))
    before = _fingerprint(path)
    with pytest.raises(TrackerCorrupt):
        await EmbeddedTracker.open(str(path))
    assert _fingerprint(path) == before


async def test_foreign_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    before = _fingerprint(path)
    with pytest.raises(TrackerCorrupt, match=r"another application.*customers"):
        await EmbeddedTracker.open(str(path))
    assert _fingerprint(path) == before


async def test_other_application_id_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 12345")
    conn.close()
    before = _fingerprint(path)
    with pytest.raises(TrackerCorrupt, match="application_id 0x3039"):
        await EmbeddedTracker.open(str(path))
    assert _fingerprint(path) == before


async def test_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    tracker = await EmbeddedTracker.open(str(path))
    await tracker.aclose()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = _fingerprint(path)
    with pytest.raises(
        TrackerCorrupt, match=rf"newer backlog-worker \(schema version {SCHEMA_VERSION + 1}"
    ):
        await EmbeddedTracker.open(str(path))
    assert _fingerprint(path) == before


async def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TrackerCorrupt, match="directory"):
        await EmbeddedTracker.open(str(tmp_path))


async def test_locked_database_is_unavailable_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    tracker = await EmbeddedTracker.open(str(path), busy_timeout_ms=50)
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process holding the write lock
            with pytest.raises(TrackerUnavailable, match="busy") as info:
                await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
            assert info.value.code == "busy"
            # reads still work under WAL while the writer holds its lock
            assert (await tracker.health()).status == "ok"
            other.execute("ROLLBACK")
        finally:
            other.close()
        assert await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
    finally:
        await tracker.aclose()


async def test_closed_tracker_is_unavailable(tmp_path: Path) -> None:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    await tracker.aclose()
    await tracker.aclose()  # idempotent
    with pytest.raises(TrackerUnavailable, match="closed"):
        await tracker.health()


async def test_memory_tracker_works(tmp_path: Path) -> None:
    tracker = await EmbeddedTracker.open(":memory:")
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        lease = await tracker.claim("a", "coder", 1000)
        assert lease is not None
        assert lease.task.id == tid
    finally:
        await tracker.aclose()
