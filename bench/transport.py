"""The served rail's HTTP plumbing, A/B in one run: the worker's client and the server's protocol.

    python -m bench.transport [--tasks 2000] [--rounds 5] [--concurrency 10] [--http httptools]

The rule this measures (issue 27, item 7): a hand-written piece of HTTP plumbing stays only where
it is worth >= 1.3x tasks/s on its path against the library's public API. Two paths, two
switches, a 2 x 2 grid:

* the worker's HTTP client (``client``): ``lean``, the hand-written HTTP/1.1 transport
  (:mod:`tracker_client.nulltickets.lean`), against ``httpx``, httpx's own transport
  (``TRACKER_CLIENT_HTTP_TRANSPORT=httpx`` in the worker's environment);
* the server's HTTP protocol (``server``): ``guarded``, ``tracker serve`` as shipped (its
  subclasses of uvicorn's protocol, :mod:`tracker_client.serve.connections`), against ``stock``,
  the same ``tracker serve`` with uvicorn's own protocol class, chosen by name as
  ``uvicorn.Config(http=...)`` does (no deadlines, no caps, no one-write answers).

Both servers (``tracker serve`` on 127.0.0.1, their own SQLite file each) run for the whole
benchmark. Each round runs the four cells (client x server) in an order rotated by the round;
a cell seeds N tasks in a role of its own and one real ``python -m worker run`` (drain mode,
the ``python`` executor doing nothing, ``--concurrency`` slots) drains them. Each round also
runs one worker per client on an empty role: its CPU (start-up, imports, shutdown) is
subtracted to give the worker's CPU per task net of start-up.

Figures per cell (medians over rounds): tasks/s from the rail's own run timestamps (first start
-> last end), the worker's CPU per task (user + system, ``wait4``; gross and net of start-up)
and the server's CPU per task (``/proc``). Per path, the median of the per-round ratios (a
machine's load drifts over a round's cells alike). Prints the machine's cores and load average
before and after, and every setting. A benchmark, not a test: it checks only that every task
was transitioned.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from bench.remote import _cpu_s, _seed, listening_url
from bench.rss import reap
from bench.worker import ROOT, noop_config, worker_env

CLIENTS = ("lean", "httpx")
SERVERS = ("guarded", "stock")
#: The environment variable that switches the worker's ``http://`` client to httpx's transport.
CLIENT_ENV = "TRACKER_CLIENT_HTTP_TRANSPORT"

Cell = dict[str, float]


# -- servers --------------------------------------------------------------------------------------
def _serve_stock(argv: list[str]) -> None:
    """``tracker serve ARGV`` with uvicorn's own protocol class for ``--http``, by name, as
    ``uvicorn.Config(http="httptools")`` loads it: the ``stock`` server."""
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    from tracker_client.serve import connections
    from worker.cli import main

    def stock(limits: connections.ConnectionLimits, http: str = "h11") -> type[Any]:
        cls: type[Any] = import_from_string(HTTP_PROTOCOLS[http])
        return cls

    connections.protocol_class = stock
    sys.argv = ["backlog-worker", "tracker", "serve", *argv]
    main()


class _Server:
    """One ``tracker serve`` of the run (``guarded`` or ``stock``): its process, URL, rail."""

    def __init__(self, tmp: Path, kind: str, http: str) -> None:
        self.kind = kind
        self.db = tmp / f"{kind}.db"
        args = ["--tracker", f"sqlite://{self.db}", "--port", "0", "--create", "--http", http]
        entry = ["worker", "tracker", "serve"] if kind == "guarded" else ["bench.transport"]
        if kind == "stock":
            args = ["--serve-stock", *args]
        log = self.db.with_suffix(".log")
        with log.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", *entry, *args],
                cwd=ROOT,
                env=worker_env(str(ROOT)),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.url = listening_url(self.proc, log, f"tracker serve ({kind})")

    def stop(self) -> None:
        """SIGTERM, then wait."""
        self.proc.terminate()
        self.proc.wait(30)


# -- one drain ------------------------------------------------------------------------------------
def _drain(server: _Server, client: str, tmp: Path, role: str, n: int, concurrency: int) -> Cell:
    """One worker with ``client`` drains ``n`` no-op tasks of ``role`` through ``server``."""
    if n:
        anyio.run(_seed, server.url, role, n)
    config = noop_config(
        tmp / f"{role}.toml", server.url, concurrency=concurrency, role=role, idle_max_s=0.5
    )
    env = worker_env(str(ROOT))
    env.pop(CLIENT_ENV, None)
    if client == "httpx":
        env[CLIENT_ENV] = "httpx"
    log = tmp / f"{role}.log"
    server_before = _cpu_s(server.proc.pid)
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    [(_, worker_cpu)] = reap([proc])
    server_cpu = _cpu_s(server.proc.pid) - server_before
    if proc.returncode != 0:
        raise SystemExit(f"worker ({client}) exited {proc.returncode}: {log.read_text()[-2000:]}")
    if not n:
        return {"worker_cpu_s": worker_cpu}
    with sqlite3.connect(f"file:{server.db}?mode=ro", uri=True) as conn:
        first, last, done = conn.execute(
            "SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM runs "
            "WHERE status = 'completed' AND agent_role = ?",
            (role,),
        ).fetchone()
    if done != n:
        raise SystemExit(f"{server.kind}/{client}: transitioned {done} of {n} tasks")
    span = (last - first) / 1000
    return {
        "tasks_per_s": n / span if span else float("inf"),
        "worker_cpu_s": worker_cpu,
        "worker_us": worker_cpu * 1e6 / n,
        "server_us": server_cpu * 1e6 / n,
    }


# -- the run --------------------------------------------------------------------------------------
CELLS = [(client, server) for server in SERVERS for client in CLIENTS]


def _rounds(
    args: argparse.Namespace, servers: dict[str, _Server], tmp: Path
) -> list[dict[str, Cell]]:
    """Every round's cells (keyed ``client/server``) and start-up runs (keyed ``client/empty``)."""
    rounds = []
    for rnd in range(args.rounds):
        cells: dict[str, Cell] = {}
        shift = rnd % len(CELLS)
        for client, server in CELLS[shift:] + CELLS[:shift]:
            role = f"{client}{server}{rnd}"
            cell = _drain(servers[server], client, tmp, role, args.tasks, args.concurrency)
            cells[f"{client}/{server}"] = cell
            print(
                f"  round {rnd + 1} {client:>5}/{server:<7}: {cell['tasks_per_s']:7.0f} tasks/s,"
                f" worker {cell['worker_us']:5.0f} us/task,"
                f" server {cell['server_us']:5.0f} us/task",
                file=sys.stderr,
                flush=True,
            )
        for client in CLIENTS if rnd % 2 == 0 else CLIENTS[::-1]:
            role = f"{client}empty{rnd}"
            empty = _drain(servers["guarded"], client, tmp, role, 0, args.concurrency)
            cells[f"{client}/empty"] = empty
        for client in CLIENTS:
            startup = cells[f"{client}/empty"]["worker_cpu_s"]
            for server in SERVERS:
                cell = cells[f"{client}/{server}"]
                cell["worker_net_us"] = (cell["worker_cpu_s"] - startup) * 1e6 / args.tasks
        rounds.append(cells)
    return rounds


def _median(rounds: list[dict[str, Cell]], cell: str, key: str) -> float:
    return statistics.median(r[cell][key] for r in rounds)


def _ratio(rounds: list[dict[str, Cell]], a: str, b: str, key: str) -> str:
    """Median over rounds of ``a``'s ``key`` over ``b``'s (each round's own pair)."""
    values = [r[a][key] / r[b][key] for r in rounds if r[b][key]]
    return f"{statistics.median(values):.2f}x" if values else "-"


def _versions() -> str:
    names = ("httpx", "httpcore", "h11", "uvicorn", "httptools", "uvloop", "anyio")
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} -")
    return ", ".join(found)


def _print(args: argparse.Namespace, rounds: list[dict[str, Cell]], load: list[str]) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"settings: {args.tasks} tasks per cell, {args.rounds} rounds (cells rotated per round),"
        f" 1 worker process, concurrency {args.concurrency}, drain mode, python executor doing"
        f" nothing; tracker serve --http {args.http} on 127.0.0.1 (SQLite, uvloop where"
        " installed); cycle claim -> transition with the served extensions (keep-alive,"
        " claim_many, finish_many)"
    )
    print(f"machine: {cores} cores, Python {platform.python_version()}, {platform.platform()}")
    print(f"versions: {_versions()}")
    print(f"load average (1, 5, 15 min): before {load[0]}, after {load[1]}")
    print()
    print(
        f"{'client/server':<16}{'tasks/s':>9}{'worker us/task':>16}{'net of start-up':>17}"
        f"{'server us/task':>16}"
    )
    for client, server in CELLS:
        key = f"{client}/{server}"
        print(
            f"{key:<16}{_median(rounds, key, 'tasks_per_s'):>9.0f}"
            f"{_median(rounds, key, 'worker_us'):>16.0f}"
            f"{_median(rounds, key, 'worker_net_us'):>17.0f}"
            f"{_median(rounds, key, 'server_us'):>16.0f}"
        )
    for client in CLIENTS:
        print(f"{client} start-up CPU: {_median(rounds, f'{client}/empty', 'worker_cpu_s'):.2f} s")
    print()
    print("medians of per-round ratios (tasks/s: A over B; CPU: B's over A's, >1 = A cheaper)")
    print(f"{'path':<40}{'tasks/s':>9}{'worker CPU':>12}{'net':>8}{'server CPU':>12}")
    pairs = [
        (f"client: lean / httpx on {server}", f"lean/{server}", f"httpx/{server}")
        for server in SERVERS
    ] + [
        (f"server: guarded / stock with {client}", f"{client}/guarded", f"{client}/stock")
        for client in CLIENTS
    ]
    for name, a, b in pairs:
        print(
            f"{name:<40}{_ratio(rounds, a, b, 'tasks_per_s'):>9}"
            f"{_ratio(rounds, b, a, 'worker_us'):>12}{_ratio(rounds, b, a, 'worker_net_us'):>8}"
            f"{_ratio(rounds, b, a, 'server_us'):>12}"
        )


def main() -> None:
    """Run the rounds and print the figures (or, with ``--serve-stock``, be the stock server)."""
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-stock":
        _serve_stock(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000, help="tasks per cell")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=10, help="the worker's slots")
    parser.add_argument("--http", choices=("httptools", "h11"), default="httptools")
    args = parser.parse_args()
    load = [", ".join(f"{x:.2f}" for x in os.getloadavg())]
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        servers: dict[str, _Server] = {}
        try:
            for kind in SERVERS:
                servers[kind] = _Server(tmp, kind, args.http)
            rounds = _rounds(args, servers, tmp)
        finally:
            for server in servers.values():
                server.stop()
    load.append(", ".join(f"{x:.2f}" for x in os.getloadavg()))
    _print(args, rounds, load)


if __name__ == "__main__":
    main()
