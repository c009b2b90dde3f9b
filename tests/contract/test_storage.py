"""Embedded-only: the database file. Unusable files are refused untouched; new files are private.

These tests open files directly (they are not parametrised over implementations).
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.contract.support import FakeClock, make_pipeline, new_task
from tracker_client.errors import BacklogFull, ConfigError, TrackerCorrupt
from tracker_client.factory import open_tracker

pytestmark = pytest.mark.anyio

APPLICATION_ID = 0x424B4C47


def _url(path: Path, **query: object) -> str:
    suffix = "&".join(f"{k}={v}" for k, v in query.items())
    return f"sqlite:///{path}" + (f"?{suffix}" if suffix else "")


async def _assert_refused(path: Path, *words: str) -> None:
    before = path.read_bytes()
    others = {p.name for p in path.parent.iterdir()}
    with pytest.raises(TrackerCorrupt) as err:
        await open_tracker(_url(path))
    message = str(err.value)
    assert path.name in message, f"the file is not named in {message!r}"
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"
    assert path.read_bytes() == before, "the refused file was modified"
    # SQLite may leave an empty -shm/-wal pair behind; nothing else may appear
    for extra in {p.name for p in path.parent.iterdir()} - others:
        assert extra in (f"{path.name}-shm", f"{path.name}-wal"), extra
        if extra.endswith("-wal"):
            assert (path.parent / extra).stat().st_size == 0, "a WAL was written"


async def test_new_file_is_private_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    tracker = await open_tracker(_url(path))
    try:
        pid = await make_pipeline(tracker)
        tid = await tracker.create_task(new_task(pid))
    finally:
        await tracker.aclose()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert db.execute("PRAGMA user_version").fetchone()[0] >= 1
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    tracker = await open_tracker(_url(path))
    try:
        assert (await tracker.get_task(tid)).stage == "todo"
    finally:
        await tracker.aclose()


async def test_memory_database_works() -> None:
    tracker = await open_tracker("sqlite:///:memory:", clock=FakeClock())
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_task(new_task(pid))
        assert (await tracker.claim("a", "coder", 1_000)) is not None
    finally:
        await tracker.aclose()


async def test_url_options_are_coerced(tmp_path: Path) -> None:
    tracker = await open_tracker(_url(tmp_path / "rail.db", max_backlog_depth=1))
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_task(new_task(pid))
        with pytest.raises(BacklogFull) as err:
            await tracker.create_task(new_task(pid))
        assert err.value.cap == 1
    finally:
        await tracker.aclose()


async def test_url_options_per_role_caps_and_stale_limit(tmp_path: Path) -> None:
    clock = FakeClock()
    url = _url(tmp_path / "rail.db", role_backlog_depth="coder=1", max_stale_attempts="1")
    tracker = await open_tracker(url, clock=clock)
    try:
        pid = await make_pipeline(tracker)
        tid = await tracker.create_task(new_task(pid))
        with pytest.raises(BacklogFull):
            await tracker.create_task(new_task(pid))
        await tracker.claim("a", "coder", 1_000)
        clock.advance(1_001)
        assert await tracker.claim("a", "coder", 1_000) is None
        assert (await tracker.get_task(tid)).dead_letter_reason == "crash_loop"
    finally:
        await tracker.aclose()


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"max_backlog_depth": "lots"}, "max_backlog_depth"),
        ({"synchronous": "SOMETIMES"}, "synchronous"),
        ({"no_such_option": "1"}, "no_such_option"),
    ],
)
async def test_bad_url_options_are_named(tmp_path: Path, query: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        await open_tracker(_url(tmp_path / "rail.db", **query))
    assert named in str(err.value)
    assert not (tmp_path / "rail.db").exists()


async def test_aclose_is_idempotent(tmp_path: Path) -> None:
    tracker = await open_tracker(_url(tmp_path / "rail.db"))
    await tracker.aclose()
    await tracker.aclose()


async def test_random_bytes_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    path.write_bytes(os.urandom(8192))
    await _assert_refused(path)


async def test_text_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    path.write_text("[tracker]\nurl = 'sqlite:///rail.db'\n" * 200)
    await _assert_refused(path)


async def test_corrupt_sqlite_file_is_refused(tmp_path: Path) -> None:
    # a real tracker file whose pages were overwritten after the header
    path = tmp_path / "rail.db"
    tracker = await open_tracker(_url(path))
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_tasks([new_task(pid, "x" * 500) for _ in range(50)])
    finally:
        await tracker.aclose()
    data = bytearray(path.read_bytes())
    assert len(data) > 8192
    data[100:] = os.urandom(len(data) - 100)
    path.write_bytes(bytes(data))
    for leftover in tmp_path.glob("rail.db-*"):
        leftover.unlink()
    await _assert_refused(path)


async def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO users (name) VALUES ('alice')")
    db.close()
    await _assert_refused(path)


async def test_other_application_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA application_id = 1179011410")  # another application's id
        db.execute("CREATE TABLE t (x)")
    db.close()
    await _assert_refused(path)


async def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    tracker = await open_tracker(_url(path))
    await tracker.aclose()
    with sqlite3.connect(path) as db:
        current = db.execute("PRAGMA user_version").fetchone()[0]
        db.execute(f"PRAGMA user_version = {current + 1000}")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    await _assert_refused(path, str(current + 1000))
