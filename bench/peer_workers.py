"""The peers' worker processes for :mod:`bench.peers`: arq, Celery, procrastinate, huey and
PgQueuer.

    python -m bench.peer_workers arq REDIS_PORT CONCURRENCY
    python -m bench.peer_workers procrastinate CONNINFO CONCURRENCY
    python -m bench.peer_workers huey SQLITE_FILE CONCURRENCY OUT_JSON
    python -m bench.peer_workers pgqueuer DSN CONCURRENCY
    python -m bench.peer_workers celery REDIS_PORT CONCURRENCY OUT_JSON
    python -m bench.peer_workers KIND-serve WHERE CONCURRENCY  (KIND: one of the five)
    python -m bench.peer_workers settings KIND CONCURRENCY

Each drains its queue of no-op jobs and exits (arq ``burst=True`` with ``poll_delay`` 0.05 s;
procrastinate ``wait=False``; huey's consumer stopped once the queue is empty
(:mod:`bench.peer_huey`); PgQueuer's ``drain`` mode (:mod:`bench.peer_pgqueuer`); Celery's
worker shut down once the queue is empty (:mod:`bench.peer_celery`)); a
``-serve`` kind runs the same worker idle until stopped, for the pickup latency bench
(:mod:`bench.peers_pickup`); ``settings`` prints how KIND runs, read on the interpreter its
workers run on (its venv of its own under ``--own-venvs``: the versions printed are the ones
measured). This module imports only its peer (never this project's packages), so a peer
worker's peak RSS is that peer's own.

Every peer worker logs at the level :data:`LOG_LEVEL_ENV` names (``bench.peers --log-level``;
WARNING when unset), through ``logging.basicConfig`` (arq, procrastinate, huey, PgQueuer) or
its own option (Celery's ``--loglevel``), as this project's workers take
``BACKLOG_WORKER_LOG_LEVEL``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

ARQ_POLL_DELAY_S = 0.05
#: The environment variable holding the peers' log level (``bench.peers --log-level``).
LOG_LEVEL_ENV = "BENCH_PEERS_LOG_LEVEL"
#: The level a peer worker logs at when :data:`LOG_LEVEL_ENV` is unset (the benchmarks').
DEFAULT_LOG_LEVEL = "WARNING"


def log_level() -> str:
    """The level every peer worker logs at (:data:`LOG_LEVEL_ENV`, else WARNING)."""
    return os.environ.get(LOG_LEVEL_ENV) or DEFAULT_LOG_LEVEL


async def arq_noop(ctx: dict[str, Any]) -> None:
    """arq's no-op job."""


async def arq_stamp(ctx: dict[str, Any], sample: str) -> None:
    """arq's pickup job: stamp its start (:mod:`bench.peers_stamp`)."""
    from bench.peers_stamp import write_stamp

    write_stamp(sample)


def procrastinate_app(conninfo: str) -> Any:
    """A procrastinate App on ``conninfo`` with the no-op task ``noop`` registered."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    @app.task(name="noop")
    async def noop() -> None:
        """procrastinate's no-op task."""

    @app.task(name="stamp")
    async def stamp(sample: str) -> None:
        """procrastinate's pickup task: stamp its start (:mod:`bench.peers_stamp`)."""
        from bench.peers_stamp import write_stamp

        write_stamp(sample)

    return app


def _arq(port: int, concurrency: int, burst: bool = True) -> None:
    from arq.connections import RedisSettings
    from arq.worker import Worker

    Worker(
        functions=[arq_noop, arq_stamp],
        redis_settings=RedisSettings(host="127.0.0.1", port=port),
        max_jobs=concurrency,
        poll_delay=ARQ_POLL_DELAY_S,
        burst=burst,
        handle_signals=False,
        log_results=False,
    ).run()


def _procrastinate(conninfo: str, concurrency: int, wait: bool = False) -> None:
    app = procrastinate_app(conninfo)
    app.run_worker(concurrency=concurrency, wait=wait, install_signal_handlers=False)


def settings(kind: str, concurrency: int) -> str:
    """How the peer ``kind`` runs in the benchmark, from this interpreter's packages."""
    from importlib.metadata import version

    if kind == "arq":
        return (
            f"arq {version('arq')}: burst workers, max_jobs={concurrency}, poll_delay "
            f"{ARQ_POLL_DELAY_S:g} s, logging {log_level()}"
        )
    if kind == "procrastinate":
        return (
            f"procrastinate {version('procrastinate')}: PsycopgConnector, "
            f"run_worker(concurrency={concurrency}, wait=False), logging {log_level()}"
        )
    if kind == "huey":
        from bench.peer_huey import settings as huey_settings

        return huey_settings(concurrency)
    if kind == "pgqueuer":
        from bench.peer_pgqueuer import settings as pgq_settings

        return pgq_settings(concurrency)
    if kind == "celery":
        from bench.peer_celery import settings as celery_settings

        return celery_settings(concurrency)
    raise SystemExit(f"unknown peer {kind!r} (arq, celery, procrastinate, huey, pgqueuer)")


def main() -> None:
    """Run one peer worker to its queue's end (arguments: see the module docstring)."""
    if sys.argv[1] == "settings":
        print(settings(sys.argv[2], int(sys.argv[3])))
        return
    logging.basicConfig(level=log_level())
    kind, where, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "arq":
        _arq(int(where), concurrency)
    elif kind == "procrastinate":
        _procrastinate(where, concurrency)
    elif kind == "huey":
        from bench.peer_huey import consume

        consume(where, concurrency, Path(sys.argv[4]))
    elif kind == "pgqueuer":
        from bench.peer_pgqueuer import consume as pgq_consume

        pgq_consume(where, concurrency)
    elif kind == "celery":
        from bench.peer_celery import consume as celery_consume

        celery_consume(int(where), concurrency, Path(sys.argv[4]))
    elif kind == "celery-serve":
        from bench.peer_celery import serve as celery_serve

        celery_serve(int(where), concurrency)
    elif kind == "arq-serve":
        _arq(int(where), concurrency, burst=False)
    elif kind == "procrastinate-serve":
        _procrastinate(where, concurrency, wait=True)
    elif kind == "huey-serve":
        from bench.peer_huey import serve

        serve(where, concurrency)
    elif kind == "pgqueuer-serve":
        from bench.peer_pgqueuer import consume as pgq_serve

        pgq_serve(where, concurrency, drain=False)
    else:
        raise SystemExit(
            f"unknown peer {kind!r} (arq, celery, procrastinate, huey, pgqueuer; each also -serve)"
        )


if __name__ == "__main__":
    main()
