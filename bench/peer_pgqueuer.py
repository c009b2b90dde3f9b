"""PgQueuer's side of the same-run benchmark (:mod:`bench.peers`): its schema, its no-op
entrypoint and a worker run as its ``pgq run`` runs one.

``pgq run`` crashes at start in 1.6.0, so :func:`consume` does what it does from a small runner:
``pgqueuer.run`` (the supervisor ``pgq run`` calls) with a factory yielding a ``QueueManager``
on an asyncpg connection (PgQueuer's own driver) with one no-op entrypoint, on uvloop as the
command line picks it, in ``drain`` mode (its own: exit once the queue is empty and the jobs in
flight are done). ``batch_size`` is its default (10). A worker's cap on jobs in flight
(``max_concurrent_tasks``) must be at least twice the batch, so the concurrency asked for is
raised to that floor (20 for 10): the closest PgQueuer takes. Tables are installed with its
default durability (``durable``: every table logged).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from bench.peer_workers import log_level

#: PgQueuer's default ``batch_size`` (``pgq run --batch-size``).
BATCH_SIZE = 10
ENTRYPOINT = "noop"
STAMP = "stamp"


def max_concurrent(concurrency: int) -> int:
    """The cap on jobs in flight a worker gets: ``concurrency``, raised to PgQueuer's floor."""
    return max(concurrency, 2 * BATCH_SIZE)


def settings(concurrency: int) -> str:
    """How PgQueuer runs here, for the benchmark's header."""
    from importlib.metadata import version

    return (
        f"pgqueuer {version('pgqueuer')} (asyncpg {version('asyncpg')}, uvloop): QueueManager "
        f"via pgqueuer.run, mode=drain, batch_size={BATCH_SIZE} (default), max_concurrent_tasks="
        f"{max_concurrent(concurrency)} (its floor 2 x batch_size), durability durable "
        f"(default), logging {log_level()}"
    )


async def install(dsn: str) -> None:
    """Install PgQueuer's schema on the database ``dsn`` (as ``pgq install``)."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def seed(dsn: str, n: int) -> None:
    """Enqueue ``n`` no-op jobs, 500 a statement."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(conn))
        for start in range(0, n, 500):
            size = min(n, start + 500) - start
            await queries.enqueue([ENTRYPOINT] * size, [None] * size, [0] * size)
    finally:
        await conn.close()


def _factory(dsn: str) -> Any:
    @asynccontextmanager
    async def factory() -> AsyncIterator[Any]:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager

        conn = await asyncpg.connect(dsn)
        try:
            qm = QueueManager(Queries(AsyncpgDriver(conn)))

            @qm.entrypoint(ENTRYPOINT)
            async def noop(job: Job) -> None:
                """PgQueuer's no-op job."""

            @qm.entrypoint(STAMP)
            async def stamp(job: Job) -> None:
                """PgQueuer's pickup job: stamp its start (:mod:`bench.peers_stamp`)."""
                from bench.peers_stamp import write_stamp

                write_stamp((job.payload or b"").decode())

            yield qm
        finally:
            await conn.close()

    return factory


@asynccontextmanager
async def producer(dsn: str) -> AsyncIterator[Any]:
    """The pickup bench's producer: an async callable enqueueing one stamp job."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))

    async def enqueue(sample: str) -> None:
        await queries.enqueue(STAMP, sample.encode())

    try:
        yield enqueue
    finally:
        await conn.close()


def consume(dsn: str, concurrency: int, drain: bool = True) -> None:
    """One PgQueuer worker drains the queue on ``dsn`` and returns (``drain``), or serves it
    until stopped (its ``continuous`` mode: LISTEN/NOTIFY, the pickup bench)."""
    import pgqueuer
    import uvloop
    from pgqueuer.domain.types import QueueExecutionMode

    logging.getLogger("pgqueuer").setLevel(log_level())
    uvloop.run(
        pgqueuer.run(
            _factory(dsn),
            batch_size=BATCH_SIZE,
            mode=QueueExecutionMode.drain if drain else QueueExecutionMode.continuous,
            max_concurrent_tasks=max_concurrent(concurrency),
            dequeue_timeout=timedelta(seconds=30),
        )
    )


#: Its first pick and last success from its own log table, and how many succeeded.
SPAN_SQL = (
    "SELECT count(*) FILTER (WHERE status = 'successful'), "
    "extract(epoch FROM min(created) FILTER (WHERE status = 'picked')), "
    "extract(epoch FROM max(created) FILTER (WHERE status = 'successful')) FROM pgqueuer_log"
)
