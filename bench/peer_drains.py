"""The peers' side of the same-run benchmark (:mod:`bench.peers`): arq on a local Redis,
procrastinate and PgQueuer on a local PostgreSQL, huey on a SQLite file, each draining N no-op
tasks with worker processes, and the shared result row (tasks/s from the queue's own
timestamps, or for huey its workers' own clocks; peak RSS; CPU per task).

Kept apart from :mod:`bench.peers` so :mod:`bench.postgres` can run procrastinate in its own
runs without importing the peer benchmark that imports it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from bench.rss import reap
from tests.postgres.server import PgServer

ROOT = Path(__file__).resolve().parents[1]

Result = dict[str, Any]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The interpreter each peer's workers run on, by peer (``huey``, ``pgqueuer`` ...); a peer not
#: listed runs on this one. :mod:`bench.memory` and ``bench.peers --own-venvs`` fill it with
#: each peer's venv of its own (:mod:`bench.peers_venvs`), so its RSS is its own.
PYTHONS: dict[str, str] = {}


def _peer(kind: str, where: str, concurrency: int, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    python = PYTHONS.get(kind.removesuffix("-serve"), sys.executable)
    argv = [python, "-m", "bench.peer_workers", kind, where, str(concurrency), *extra]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


Reaped = list[tuple[float, float]]


def _reap(workers: list[subprocess.Popen[bytes]]) -> Reaped:
    """Wait for every worker process: (peak RSS MiB, CPU s) each, from ``wait4``."""
    return reap(workers)


def _result(
    workers: list[subprocess.Popen[bytes]], reaped: Reaped, done: int, first: float, last: float
) -> Result:
    span = last - first
    return {
        "done": done,
        "tasks_per_s": done / span if span > 0 else 0.0,
        "peak_rss_mib": max(rss for rss, _ in reaped),
        "cpu_us_per_task": sum(cpu for _, cpu in reaped) / done * 1e6 if done else 0.0,
        "exit_codes": [p.returncode for p in workers],
    }


# -- brokers --------------------------------------------------------------------------------------
class Redis:
    """``redis-server`` on a free 127.0.0.1 port, no persistence, stopped by pid."""

    def __init__(self, tmp: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed: apt-get install redis-server")
        self.port = _free_port()
        argv = [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(tmp)]
        argv += ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit("redis-server did not start")
            time.sleep(0.02)  # polling a real condition (PING answered) under a deadline

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server (by pid)."""
        self.proc.terminate()
        self.proc.wait(30)


# -- peers ----------------------------------------------------------------------------------------
async def _arq_seed(port: int, n: int) -> None:
    from arq.connections import RedisSettings, create_pool

    pool = await create_pool(RedisSettings(host="127.0.0.1", port=port))
    try:
        await pool.flushall()
        for _ in range(n):
            await pool.enqueue_job("arq_noop")
    finally:
        await pool.aclose()


async def _arq_span(port: int) -> tuple[int, float, float]:
    from arq.connections import RedisSettings, create_pool

    pool = await create_pool(RedisSettings(host="127.0.0.1", port=port))
    try:
        results = [r for r in await pool.all_job_results() if r.success]
    finally:
        await pool.aclose()
    if not results:
        return 0, 0.0, 0.0
    first = min(r.start_time for r in results).timestamp()
    return len(results), first, max(r.finish_time for r in results).timestamp()


def arq_drain(redis: Redis, n: int, procs: int, concurrency: int) -> Result:
    """arq workers drain ``n`` no-op jobs."""
    anyio.run(_arq_seed, redis.port, n)
    workers = [_peer("arq", str(redis.port), concurrency) for _ in range(procs)]
    reaped = _reap(workers)
    done, first, last = anyio.run(_arq_span, redis.port)
    return _result(workers, reaped, done, first, last)


def _new_database(server: PgServer) -> str:
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.url.rsplit("/", 1)[0] + f"/{name}"


async def _procrastinate_seed(conninfo: str, n: int) -> None:
    from bench.peer_workers import procrastinate_app

    app = procrastinate_app(conninfo)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        task = app.tasks["noop"]
        for start in range(0, n, 500):
            await task.batch_defer_async(*({} for _ in range(start, min(n, start + 500))))


def procrastinate_drain(server: PgServer, n: int, procs: int, concurrency: int) -> Result:
    """procrastinate workers drain ``n`` no-op jobs on a fresh database."""
    import psycopg

    conninfo = _new_database(server)
    anyio.run(_procrastinate_seed, conninfo, n)
    workers = [_peer("procrastinate", conninfo, concurrency) for _ in range(procs)]
    reaped = _reap(workers)
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE type = 'succeeded'), "
            "extract(epoch FROM min(at) FILTER (WHERE type = 'started')), "
            "extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')) "
            "FROM procrastinate_events"
        ).fetchone()
    assert row is not None
    done, first, last = row
    return _result(workers, reaped, done, float(first or 0), float(last or 0))


def _clocked(workers: list[subprocess.Popen[bytes]], reaped: Reaped, outs: list[Path]) -> Result:
    """The result of workers that clock themselves: each wrote its count and its first start
    and last finish to its ``out`` file (a worker that wrote none did no task)."""
    stats = [json.loads(out.read_text()) for out in outs if out.exists()]
    firsts = [s["first"] for s in stats if s["first"] is not None]
    done = sum(s["done"] for s in stats)
    last = max((s["last"] for s in stats), default=0.0)
    return _result(workers, reaped, done, min(firsts, default=0.0), last)


def celery_drain(redis: Redis, n: int, procs: int, concurrency: int) -> Result:
    """Celery workers (threads pool) drain ``n`` no-op tasks from the local Redis."""
    from bench.peer_celery import seed

    with tempfile.TemporaryDirectory() as tmp_s:
        redis_flush(redis)
        seed(redis.port, n)
        outs = [Path(tmp_s) / f"worker-{i}.json" for i in range(procs)]
        workers = [_peer("celery", str(redis.port), concurrency, str(out)) for out in outs]
        return _clocked(workers, _reap(workers), outs)


def redis_flush(redis: Redis) -> None:
    """Empty the local Redis (the previous drain's keys)."""
    with socket.create_connection(("127.0.0.1", redis.port), timeout=10) as s:
        s.sendall(b"FLUSHALL\r\n")
        if not s.recv(16).startswith(b"+OK"):
            raise RuntimeError("redis-server refused FLUSHALL")


def huey_drain(n: int, procs: int, concurrency: int) -> Result:
    """huey consumers (``SqliteHuey``, thread workers) drain ``n`` no-op tasks from a file.

    huey keeps no timestamps (a dequeue deletes the row), so each consumer reports its own
    first start and last finish (its ``executing``/``complete`` signals) and its count."""
    from bench.peer_huey import seed

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = str(tmp / "huey.db")
        seed(db, n)
        outs = [tmp / f"consumer-{i}.json" for i in range(procs)]
        workers = [_peer("huey", db, concurrency, str(out)) for out in outs]
        return _clocked(workers, _reap(workers), outs)


def pgqueuer_drain(server: PgServer, n: int, procs: int, concurrency: int) -> Result:
    """PgQueuer workers (``QueueManager``, drain mode) drain ``n`` no-op jobs on a fresh
    database."""
    import psycopg

    from bench import peer_pgqueuer

    conninfo = _new_database(server)
    anyio.run(peer_pgqueuer.install, conninfo)
    anyio.run(peer_pgqueuer.seed, conninfo, n)
    workers = [_peer("pgqueuer", conninfo, concurrency) for _ in range(procs)]
    reaped = _reap(workers)
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(peer_pgqueuer.SPAN_SQL).fetchone()
    assert row is not None
    done, first, last = row
    return _result(workers, reaped, done, float(first or 0), float(last or 0))
