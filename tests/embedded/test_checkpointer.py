"""The checkpointer of an embedded rail: a PASSIVE checkpoint a second after the commits it is
told of, none and no wake-up while nothing is committed (tracker_client/embedded/dbthread.py).

Real SQLite files in WAL mode and the real checkpointer thread; the writes are another
connection's, each followed by the call the database thread makes after a commit
(``committed``). What was checkpointed is SQLite's own answer to each checkpoint (frames in
the WAL, frames copied back); whether the thread was woken is the kernel's count of its
context switches (``/proc``).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import anyio
import pytest

from tracker_client.embedded.dbthread import Checkpointer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _connect(path: Path) -> sqlite3.Connection:
    """A connection as the rail's: WAL, no automatic checkpoint (the checkpointer's job)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


class Writer:
    """Commits on a connection and tells the checkpointer, as the database thread does."""

    def __init__(self, conn: sqlite3.Connection, checkpointer: Checkpointer) -> None:
        self.conn = conn
        self.checkpointer = checkpointer
        self.commits = 0

    def commit(self, sql: str = "INSERT INTO t VALUES (randomblob(100))") -> None:
        self.conn.execute(sql)
        self.commits += 1
        self.checkpointer.committed(self.commits)


@contextmanager
def _checkpointer(path: Path) -> Iterator[Checkpointer]:
    checkpointer = Checkpointer(str(path), 5000)
    try:
        yield checkpointer
    finally:
        checkpointer.stop()
        checkpointer.thread.join(10)


def _complete(checkpointer: Checkpointer) -> bool:
    """The last checkpoint copied every frame of the WAL back (and there were some)."""
    last = checkpointer.last
    return last is not None and last[0] == 0 and last[1] == last[2] > 0


def _woken(checkpointer: Checkpointer) -> int:
    """How many times the kernel woke the checkpointer's thread (voluntary switches)."""
    status = Path(f"/proc/self/task/{checkpointer.thread.native_id}/status").read_text()
    [line] = [x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches:")]
    return int(line.split(":")[1])


async def _until(condition: Callable[[], bool]) -> None:
    """Look at ``condition()`` until it holds: the checkpointer runs a second after a commit."""
    with anyio.fail_after(20):
        while not condition():
            await anyio.sleep(0.02)


@pytest.mark.skipif(sys.platform != "linux", reason="the thread's wake-ups are read from /proc")
async def test_nothing_committed_no_checkpoint_and_no_wake_up(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    with closing(_connect(path)) as conn, _checkpointer(path) as checkpointer:
        writer = Writer(conn, checkpointer)
        writer.commit("CREATE TABLE t (x)")
        writer.commit()
        await _until(lambda: _complete(checkpointer))
        runs, woken = checkpointer.runs, _woken(checkpointer)
        # Quiet for 2.5 s: the thread was checkpointing (and woken) every second before.
        await anyio.sleep(2.5)
        assert checkpointer.runs == runs
        assert _woken(checkpointer) - woken <= 1
        # The next commit is checkpointed.
        writer.commit()
        await _until(lambda: checkpointer.runs > runs and _complete(checkpointer))


async def test_frames_a_reader_held_back_are_checkpointed_once_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    with (
        closing(_connect(path)) as conn,
        closing(_connect(path)) as reader,
        _checkpointer(path) as checkpointer,
    ):
        writer = Writer(conn, checkpointer)
        writer.commit("CREATE TABLE t (x)")
        # A reader on this snapshot: the frames written after it cannot be copied back.
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (0,)
        for _ in range(50):
            writer.commit()
        await _until(lambda: checkpointer.last is not None and checkpointer.runs >= 1)
        last = checkpointer.last
        assert last is not None and last[2] < last[1]
        reader.execute("COMMIT")
        # Nothing committed since: the checkpoint that left frames behind is tried again.
        await _until(lambda: _complete(checkpointer))


async def test_frames_an_earlier_process_left_are_checkpointed_at_the_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rail.db"
    with closing(_connect(path)) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES (1)")  # nobody told: a process that died since
        with _checkpointer(path) as checkpointer:
            await _until(lambda: _complete(checkpointer))


async def test_a_burst_is_checkpointed_to_its_last_commit(tmp_path: Path) -> None:
    path = tmp_path / "rail.db"
    with closing(_connect(path)) as conn, _checkpointer(path) as checkpointer:
        writer = Writer(conn, checkpointer)
        writer.commit("CREATE TABLE t (x)")
        while checkpointer.runs < 2:  # commits across checkpoints, then none
            writer.commit()
            await anyio.sleep(0.002)
        runs = checkpointer.runs
        writer.commit()  # the burst's last commit, after the last checkpoint began
        await _until(lambda: checkpointer.runs > runs and _complete(checkpointer))


def _wal_restarts(path: Path) -> int:
    """The WAL header's checkpoint sequence number: SQLite adds one at each restart of the
    WAL, written with the restarted WAL's first frame."""
    header = path.with_name(path.name + "-wal").read_bytes()[:16]
    return int.from_bytes(header[12:16], "big")


async def test_a_complete_checkpoint_restarts_the_wal_before_the_next_write(
    tmp_path: Path,
) -> None:
    # The first commit after a checkpoint that copied every frame back restarts the WAL: a new
    # header, synced (~0.3-0.45 ms), on the path of whatever write came first after a quiet
    # second (the create of an idle worker's next task). The checkpointer restarts it itself.
    path = tmp_path / "rail.db"
    with closing(_connect(path)) as conn, _checkpointer(path) as checkpointer:
        writer = Writer(conn, checkpointer)
        writer.commit("CREATE TABLE t (x)")
        writer.commit()
        before = _wal_restarts(path)
        await _until(lambda: _complete(checkpointer) and _wal_restarts(path) > before)
        # The rail's next write appends to the restarted WAL: no restart of its own.
        restarted = _wal_restarts(path)
        writer.commit()
        assert _wal_restarts(path) == restarted
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
