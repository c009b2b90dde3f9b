"""huey's side of the same-run benchmark (:mod:`bench.peers`): a ``SqliteHuey`` on a file with
its no-op task, and the consumer that drains it.

The task lives in this module (huey keys a task by its function's module and name, so the
seeding process and the consumer must import it from the same module, never ``__main__``).
The storage is huey's ``SqliteStorage`` in its default WAL mode with ``synchronous=NORMAL``, as
the embedded rail runs (huey's own ``fsync`` switch knows only FULL and OFF). The consumer is
the one ``huey_consumer`` runs (``Consumer`` with its defaults: thread workers, 0.1 s initial
poll back-off, periodic scheduler on) with ``workers`` = the concurrency; it has no drain mode,
so :func:`consume` stops it gracefully once the queue is empty and no task is running, as a
user stops it with SIGINT.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

#: The pragma huey's storage is given on each connection (the embedded rail's default).
SYNCHRONOUS = "NORMAL"
#: How often :func:`consume` looks whether the queue is drained.
DRAIN_POLL_S = 0.05


def noop() -> None:
    """huey's no-op task."""


def stamp(sample: str) -> None:
    """huey's pickup task: stamp its start (:mod:`bench.peers_stamp`)."""
    from bench.peers_stamp import write_stamp

    write_stamp(sample)


def huey_app(filename: str, func: Any = noop) -> Any:
    """A ``SqliteHuey`` on ``filename`` (``synchronous=NORMAL``) with ``func`` (:func:`noop`
    or :func:`stamp`) registered; returns ``(huey, task)``."""
    from huey import SqliteHuey
    from huey.storage import SqliteStorage

    class Storage(SqliteStorage):  # type: ignore[misc]
        """huey's SQLite storage, each connection at ``synchronous=NORMAL``."""

        def _create_connection(self) -> Any:
            conn = super()._create_connection()
            conn.execute(f"pragma synchronous={SYNCHRONOUS}")
            return conn

    huey = SqliteHuey("bench", filename=filename, storage_class=Storage)
    return huey, huey.task()(func)


#: SQLite's ``synchronous`` levels by number (``PRAGMA synchronous`` answers the number).
_SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def settings(concurrency: int) -> str:
    """How huey runs here, for the benchmark's header: read back from a real ``SqliteHuey`` on
    a scratch file (its connection's journal mode and ``synchronous``) and from the consumer
    :func:`consume` makes (its workers and polling), so the line says what ran."""
    from importlib.metadata import version

    from bench.peer_workers import log_level

    with tempfile.TemporaryDirectory() as tmp:
        huey, _ = huey_app(str(Path(tmp) / "settings.db"))
        conn = huey.storage.conn
        journal = conn.execute("pragma journal_mode").fetchone()[0]
        synchronous = conn.execute("pragma synchronous").fetchone()[0]
        consumer = huey.create_consumer(workers=concurrency, worker_type="thread")
        huey.storage.close()
    sync = _SYNCHRONOUS_NAMES.get(synchronous, synchronous)
    c = consumer
    return (
        f"huey {version('huey')}: SqliteHuey (journal_mode={journal}, synchronous={sync}), "
        f"consumer workers={c.workers} worker_type={c.worker_type}, polling "
        f"{c.default_delay:g} s back-off x{c.backoff:g} up to {c.max_delay:g} s, "
        f"periodic={c.periodic}, logging {log_level()}"
    )


def seed(filename: str, n: int) -> None:
    """Enqueue ``n`` no-op tasks (one insert each, as ``task()`` does)."""
    _, task = huey_app(filename)
    for _ in range(n):
        task()


def serve(filename: str, concurrency: int) -> None:
    """Run huey's consumer with :func:`stamp` registered until stopped (the pickup bench)."""
    huey, _ = huey_app(filename, stamp)
    huey.create_consumer(workers=concurrency, worker_type="thread").run()


def consume(filename: str, concurrency: int, out: Path) -> None:
    """Run huey's consumer on ``filename`` until the queue is drained; write this process's
    count of completed tasks and its first start and last finish (epoch seconds) to ``out``."""
    from huey.signals import SIGNAL_COMPLETE, SIGNAL_EXECUTING

    huey, _ = huey_app(filename)
    lock = threading.Lock()
    state: dict[str, Any] = {"first": None, "last": 0.0, "done": 0, "running": 0}

    @huey.signal(SIGNAL_EXECUTING)  # type: ignore[untyped-decorator]
    def _started(signal: str, task: Any) -> None:
        now = time.time()
        with lock:
            state["running"] += 1
            if state["first"] is None:
                state["first"] = now

    @huey.signal(SIGNAL_COMPLETE)  # type: ignore[untyped-decorator]
    def _completed(signal: str, task: Any) -> None:
        now = time.time()
        with lock:
            state["running"] -= 1
            state["done"] += 1
            state["last"] = max(state["last"], now)

    consumer = huey.create_consumer(workers=concurrency, worker_type="thread")
    consumer.start()
    try:
        while True:
            time.sleep(DRAIN_POLL_S)  # the drain check, as a user watching the queue
            with lock:
                running = state["running"]
            if running == 0 and huey.pending_count() == 0:
                break
    finally:
        consumer.stop(graceful=True)  # workers finish the task they hold, as on SIGINT
    out.write_text(json.dumps({k: state[k] for k in ("first", "last", "done")}))
