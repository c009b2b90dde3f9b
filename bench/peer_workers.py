"""The peers' worker processes for :mod:`bench.peers`: arq, procrastinate, huey and PgQueuer.

    python -m bench.peer_workers arq REDIS_PORT CONCURRENCY
    python -m bench.peer_workers procrastinate CONNINFO CONCURRENCY
    python -m bench.peer_workers huey SQLITE_FILE CONCURRENCY OUT_JSON
    python -m bench.peer_workers pgqueuer DSN CONCURRENCY

Each drains its queue of no-op jobs and exits (arq ``burst=True`` with ``poll_delay`` 0.05 s;
procrastinate ``wait=False``; huey's consumer stopped once the queue is empty
(:mod:`bench.peer_huey`); PgQueuer's ``drain`` mode (:mod:`bench.peer_pgqueuer`)). This module
imports only its peer (never this project's packages), so a peer worker's peak RSS is that
peer's own.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

ARQ_POLL_DELAY_S = 0.05


async def arq_noop(ctx: dict[str, Any]) -> None:
    """arq's no-op job."""


def procrastinate_app(conninfo: str) -> Any:
    """A procrastinate App on ``conninfo`` with the no-op task ``noop`` registered."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    @app.task(name="noop")
    async def noop() -> None:
        """procrastinate's no-op task."""

    return app


def _arq(port: int, concurrency: int) -> None:
    from arq.connections import RedisSettings
    from arq.worker import Worker

    Worker(
        functions=[arq_noop],
        redis_settings=RedisSettings(host="127.0.0.1", port=port),
        max_jobs=concurrency,
        poll_delay=ARQ_POLL_DELAY_S,
        burst=True,
        handle_signals=False,
        log_results=False,
    ).run()


def _procrastinate(conninfo: str, concurrency: int) -> None:
    app = procrastinate_app(conninfo)
    app.run_worker(concurrency=concurrency, wait=False, install_signal_handlers=False)


def main() -> None:
    """Run one peer worker to its queue's end (arguments: see the module docstring)."""
    logging.basicConfig(level=logging.WARNING)
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
    else:
        raise SystemExit(f"unknown peer {kind!r} (arq, procrastinate, huey, pgqueuer)")


if __name__ == "__main__":
    main()
