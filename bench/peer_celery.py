"""Celery's side of the same-run benchmark (:mod:`bench.peers`): an app on the local Redis
with a no-op task, and a worker that drains its queue.

The worker is ``celery worker`` as started from Python (``app.worker_main``) with its
defaults (gossip, mingle, heartbeats, early acknowledgement, prefetch multiplier 4), a unique
node name per process and ``--pool threads --concurrency N``: one process running N tasks
at once, as this worker and huey's consumer do (Celery's default ``prefork`` pool would fork N
processes). No result backend: a no-op result is not stored (as with huey). Celery has no
drain mode and keeps no timestamps, so each worker counts its tasks and clocks its first start
and last finish (``task_prerun``/``task_postrun``), and a thread stops it with a warm shutdown
(SIGTERM, as a user does) once the broker's queue and its unacknowledged set are empty and
none of its tasks runs.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.peer_workers import log_level

#: How often a worker looks whether the queue is drained.
DRAIN_POLL_S = 0.05
QUEUE = "celery"


def celery_app(port: int) -> Any:
    """A Celery app on the Redis at ``port`` with the no-op task ``noop``."""
    from celery import Celery

    app = Celery("bench", broker=f"redis://127.0.0.1:{port}/0")
    app.conf.update(broker_connection_retry_on_startup=True, worker_hijack_root_logger=False)

    @app.task(name="noop")  # type: ignore[untyped-decorator]
    def noop() -> None:
        """Celery's no-op task."""

    @app.task(name="stamp")  # type: ignore[untyped-decorator]
    def stamp(sample: str) -> None:
        """Celery's pickup task: stamp its start (:mod:`bench.peers_stamp`)."""
        from bench.peers_stamp import write_stamp

        write_stamp(sample)

    return app


def _argv(concurrency: int) -> list[str]:
    return [
        "worker",
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        log_level(),
        "--hostname",
        f"bench-{uuid.uuid4().hex[:8]}@%h",
    ]


def serve(port: int, concurrency: int) -> None:
    """Run a Celery worker until stopped (the pickup bench)."""
    celery_app(port).worker_main(_argv(concurrency))


def settings(concurrency: int) -> str:
    """How Celery runs here, for the benchmark's header."""
    from importlib.metadata import version

    return (
        f"celery {version('celery')} (kombu {version('kombu')}): Redis broker (the same "
        f"redis-server as arq), worker --pool threads --concurrency {concurrency}, its defaults "
        "(prefetch multiplier 4, early ack, gossip/mingle/heartbeat on), no result backend, "
        f"--loglevel {log_level()}"
    )


def seed(port: int, n: int) -> None:
    """Send ``n`` no-op tasks (one publish each, as ``delay()`` does)."""
    app = celery_app(port)
    task = app.tasks["noop"]
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            task.apply_async(producer=producer)


def consume(port: int, concurrency: int, out: Path) -> None:
    """Run a Celery worker until the queue is drained; write this process's count of tasks
    and its first start and last finish (epoch seconds) to ``out``."""
    import redis
    from celery.signals import task_postrun, task_prerun

    app = celery_app(port)
    lock = threading.Lock()
    state: dict[str, Any] = {"first": None, "last": 0.0, "done": 0, "running": 0}

    def started(**_: Any) -> None:
        now = time.time()
        with lock:
            state["running"] += 1
            if state["first"] is None:
                state["first"] = now

    def finished(**_: Any) -> None:
        now = time.time()
        with lock:
            state["running"] -= 1
            state["done"] += 1
            state["last"] = max(state["last"], now)

    task_prerun.connect(started, weak=False)
    task_postrun.connect(finished, weak=False)

    def watch() -> None:
        client = redis.Redis(host="127.0.0.1", port=port)
        while True:
            time.sleep(DRAIN_POLL_S)  # the drain check, as a user watching the queue
            with lock:
                busy = state["running"] > 0 or state["done"] == 0
            if not busy and client.llen(QUEUE) == 0 and client.hlen("unacked") == 0:
                with lock:
                    if state["running"] == 0:
                        out.write_text(json.dumps({k: state[k] for k in ("first", "last", "done")}))
                        break
        os.kill(os.getpid(), signal.SIGTERM)  # Celery's warm shutdown

    threading.Thread(target=watch, daemon=True).start()
    app.worker_main(_argv(concurrency))
