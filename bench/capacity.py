"""Capacity of one PostgreSQL server: N worker processes, their connections, tasks/s, the
server's CPU per task and pickup latency (docs/operate/capacity.md).

    python -m bench.capacity [--procs 1,8,32,64] [--seconds 20] [--pickup 5] [--pool-size 10]

A PostgreSQL is started for the run (Debian's binaries in a temp dir on a free 127.0.0.1 port,
:class:`bench.peers_setup.StockPgServer`: stock durability, every commit flushed), with
``max_connections`` raised when the largest N times the most connections a worker may open
(``pool_size`` + its wake-up listener) would not fit the default 100 (it says so). For each N,
in a fresh schema: N real ``python -m worker run`` processes (concurrency 1 each, not draining,
the ``python`` executor :func:`bench.peers_stamp.stamp`, which appends the task's title and
the time to a file) are started and waited for (each one's listener connection is up); then
``--seconds`` x ``--rate-guess`` no-op tasks are submitted at once and drained, bounded by
``--seconds`` x 3. tasks/s is from the rail's own run timestamps (first start -> last end);
connections per worker is the most client backends (but the bench's) seen in ``pg_stat_activity``
(sampled every 0.25 s) divided by N; server CPU is the postgres processes' user + system time
over the drain (``/proc``). Then, with the rail drained and the N workers idle, ``--pickup``
timestamped tasks are submitted one at a time (:func:`bench.peers_pickup._samples`: a random
0.3-1.2 s pause, submit, the executor's stamp) for the submit -> executor start latency.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from bench.peers_kept import _seed_more
from bench.peers_pickup import _our_producer, _samples, percentile
from bench.peers_setup import StockPgServer, load, machine, pg_settings
from bench.peers_stamp import ENV
from bench.postgres import _seed, _server_cpu_s
from bench.worker import ROOT, noop_config, worker_env
from tests.postgres.server import PgServer, find_bindir

#: PostgreSQL's default ``max_connections``.
DEFAULT_MAX_CONNECTIONS = 100
#: Connections kept free beyond the workers' (the bench's own, superuser slots).
HEADROOM = 20
#: How long N workers may take to start (each with its listener up).
START_TIMEOUT_S = 120.0
#: The application name of the bench's own connections (so they are not counted).
BENCH_APP = "bench-capacity"
HEADER = (
    "| procs | tasks | tasks/s | conns | conns/worker | server CPU us/task | "
    "pickup samples | pickup p50 ms | pickup max ms |"
)


class CapacityPgServer(StockPgServer):
    """The stock server with ``max_connections`` set (the one setting changed, and only when
    the default would not fit)."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def settings(self) -> list[str]:
        """The stock settings plus ``max_connections`` when raised."""
        extra = []
        if self.max_connections != DEFAULT_MAX_CONNECTIONS:
            extra = [f"max_connections={self.max_connections}"]
        return super().settings() + extra


def connections_needed(procs: int, pool_size: int) -> int:
    """The ``max_connections`` ``procs`` workers need at most: each opens up to ``pool_size``
    pooled connections and one wake-up listener; plus :data:`HEADROOM`."""
    return procs * (pool_size + 1) + HEADROOM


def parse_procs(text: str) -> list[int]:
    """``--procs``: a comma-separated list of worker counts, each 1..512."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            n = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--procs {text!r}: {part!r} is not a whole number of worker processes"
            ) from None
        if not 1 <= n <= 512:
            raise argparse.ArgumentTypeError(f"--procs {text!r}: {n} is not in 1..512")
        out.append(n)
    return out


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


def _connections(server: PgServer) -> int:
    """The workers' backends now: every client backend but the bench's own (the rail's pool
    says ``application_name`` ``backlog-worker``; its wake-up listener sets none)."""
    import psycopg

    with psycopg.connect(server.url, application_name=BENCH_APP) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND application_name <> %s",
            (BENCH_APP,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _listeners(server: PgServer) -> int:
    """The workers' idle backends whose last statement was a LISTEN (one per started worker)."""
    import psycopg

    with psycopg.connect(server.url, application_name=BENCH_APP) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND application_name <> %s AND query ILIKE 'LISTEN %%'",
            (BENCH_APP,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _completed(server: PgServer, schema: str) -> tuple[int, float]:
    import psycopg

    with psycopg.connect(server.url, application_name=BENCH_APP) as conn:
        row = conn.execute(
            f"SELECT count(*), min(started_at_ms), max(ended_at_ms) FROM {schema}.runs "
            "WHERE status = 'completed'"
        ).fetchone()
    assert row is not None
    done, first, last = row
    return int(done), ((last - first) / 1000 if done else 0.0)


def _one(server: PgServer, procs: int, args: argparse.Namespace) -> dict[str, Any]:
    """One N: start the workers, drain the seeded tasks, sample pickup; the row's figures."""
    schema = f"cap_{uuid.uuid4().hex[:12]}"
    url = f"{server.url}?schema={schema}&pool_size={args.pool_size}"
    anyio.run(_seed, url, 0)
    tasks = max(procs, int(args.seconds * args.rate_guess))
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        stamps = tmp / "stamps"
        config = noop_config(
            tmp / "capacity.toml",
            url,
            concurrency=1,
            drain=False,
            callable_path="bench.peers_stamp:stamp",
        )
        env = {**worker_env(str(ROOT)), ENV: str(stamps)}
        argv = [sys.executable, "-m", "worker", "run", "--config", str(config)]
        workers = [
            subprocess.Popen(
                argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            for _ in range(procs)
        ]
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while _listeners(server) < procs:
                dead = [w.returncode for w in workers if w.poll() is not None]
                if dead:
                    raise RuntimeError(f"a worker exited ({dead[0]}) before it was up")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{procs} workers not up within {START_TIMEOUT_S:.0f} s")
                time.sleep(0.1)  # polling pg_stat_activity, under the deadline above
            peak = [0]
            stop = threading.Event()

            def sample() -> None:
                while not stop.wait(0.25):
                    peak[0] = max(peak[0], _connections(server))

            peak[0] = _connections(server)
            sampler = threading.Thread(target=sample, daemon=True)
            cpu = _server_cpu_s(server)
            sampler.start()
            anyio.run(_seed_more, f"{url}&application_name={BENCH_APP}", tasks)
            bound = time.monotonic() + args.seconds * 3
            done = 0
            while time.monotonic() < bound:
                done, _ = _completed(server, schema)
                if done >= tasks:
                    break
                time.sleep(0.2)  # polling the rail, under the bound above
            cpu = _server_cpu_s(server) - cpu
            stop.set()
            sampler.join()
            done, span = _completed(server, schema)
            drained = done >= tasks
            pickups: list[float] = []
            if drained and args.pickup:
                stamps.write_text("")  # the drain's stamps; the workers append per task
                pickups = anyio.run(_samples, _our_producer(url), stamps, workers[0], args.pickup)
        finally:
            for w in workers:
                w.terminate()
            for w in workers:
                try:
                    w.wait(30)
                except subprocess.TimeoutExpired:
                    w.kill()
                    w.wait(30)
    _drop(server, schema)
    pickups.sort()
    return {
        "procs": procs,
        "tasks": done,
        "seeded": tasks,
        "drained": drained,
        "tasks_per_s": done / span if span else 0.0,
        "conns": peak[0],
        "conns_per_worker": peak[0] / procs,
        "server_cpu_us_per_task": cpu / done * 1e6 if done else 0.0,
        "pickup": pickups,
    }


def _drop(server: PgServer, schema: str) -> None:
    import psycopg

    with psycopg.connect(server.url, application_name=BENCH_APP) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def row(found: dict[str, Any]) -> str:
    """One Markdown table row of :data:`HEADER`."""
    pickups: list[float] = found["pickup"]
    p50 = f"{percentile(pickups, 50) * 1000:.1f}" if pickups else "-"
    most = f"{pickups[-1] * 1000:.1f}" if pickups else "-"
    tasks = f"{found['tasks']}" + ("" if found["drained"] else f" of {found['seeded']}")
    return (
        f"| {found['procs']} | {tasks} | {found['tasks_per_s']:.0f} | {found['conns']} | "
        f"{found['conns_per_worker']:.2f} | {found['server_cpu_us_per_task']:.0f} | "
        f"{len(pickups)} | {p50} | {most} |"
    )


def parser() -> argparse.ArgumentParser:
    """The command line (see the module's docstring)."""
    p = argparse.ArgumentParser(
        prog="python -m bench.capacity", description=__doc__.splitlines()[0]
    )
    p.add_argument("--procs", type=parse_procs, default=parse_procs("1,8,32,64"))
    p.add_argument("--seconds", type=_positive, default=20.0, help="drain length target")
    p.add_argument("--rate-guess", type=_positive, default=400.0, help="tasks/s to seed for")
    p.add_argument("--pickup", type=int, default=5, help="pickup samples per N")
    p.add_argument("--pool-size", type=int, default=10, help="the rail URL's pool_size")
    return p


def main(argv: list[str] | None = None) -> None:
    """Run every N and print the machine, the server's settings and the table."""
    args = parser().parse_args(argv)
    if args.pickup < 0:
        parser().error("--pickup: at least 0")
    if not 1 <= args.pool_size <= 1000:
        parser().error("--pool-size: 1..1000")
    bindir = find_bindir()
    if bindir is None:
        parser().error("PostgreSQL is not installed: apt-get install postgresql")
    print(machine())
    print(f"load average before: {load()}")
    need = connections_needed(max(args.procs), args.pool_size)
    server = CapacityPgServer.create(bindir)
    assert isinstance(server, CapacityPgServer)  # create() is typed as the base class's
    if need > DEFAULT_MAX_CONNECTIONS:
        server.max_connections = need
        print(
            f"max_connections raised to {need}: {max(args.procs)} workers x (pool_size "
            f"{args.pool_size} + 1 listener) + {HEADROOM} headroom > the default "
            f"{DEFAULT_MAX_CONNECTIONS}"
        )
    rows: list[str] = []
    try:
        server.start()
        print(pg_settings(server))
        for procs in args.procs:
            found = _one(server, procs, args)
            rows.append(row(found))
            print(f"  N={procs}: {rows[-1]}", file=sys.stderr, flush=True)
    finally:
        server.destroy()
    print(f"load average after: {load()}")
    print(f"{os.cpu_count()} cores; pool_size={args.pool_size}; concurrency 1 per worker")
    print(HEADER)
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for line in rows:
        print(line)


if __name__ == "__main__":
    main()
