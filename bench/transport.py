"""The served rail's HTTP plumbing, A/B in one run: the worker's client and the server's protocol.

    python -m bench.transport [--tasks 2000] [--rounds 5] [--concurrency 10] [--http httptools]
                              [--before DIR]

Issue 27 (item 7) keeps a hand-written piece of HTTP plumbing only where it is worth >= 1.3x
tasks/s on its path against the library's public API. The grid of this run, one worker
process draining no-op tasks through ``tracker serve`` on 127.0.0.1:

* servers: ``guarded``, ``tracker serve`` as shipped (uvicorn's own protocol inside
  :class:`~tracker_client.serve.connections.ConnectionGuard`'s deadlines and caps), and
  ``stock``, the same ``tracker serve`` with uvicorn's protocol loaded by name as
  ``uvicorn.Config(http=...)`` does and the application unwrapped (no deadlines, no caps):
  what the guard costs;
* with ``--before DIR`` (an older source tree, e.g. ``git archive COMMIT | tar -x -C DIR``),
  ``before``: ``tracker serve`` of that tree, and a second client, that tree's worker: the
  before/after of a change on each path.

The decision's own figures came from this benchmark at the commit that still had the
hand-written client and the uvicorn subclasses (each with an in-tree switch); see
docs/benchmarks.md for the figures and the command that reproduces them.

Every server runs for the whole benchmark (its own SQLite file). Each round runs every cell
(client x server) in an order rotated by the round; a cell seeds N tasks in a role of its own
and one real ``python -m worker run`` (drain mode, the ``python`` executor doing nothing,
``--concurrency`` slots) drains them. Each round also runs each client's worker once on an
empty role: that CPU (start-up, imports, shutdown) is subtracted for the worker's CPU per task
net of start-up.

Figures per cell (medians over rounds): tasks/s from the rail's own run timestamps (first
start -> last end), the worker's CPU per task (user + system from ``wait4``; gross and net of
start-up), its peak RSS (``VmHWM``, :mod:`bench.rss`) and the server's CPU per task
(``/proc``). Per path, the median of the per-round ratios (a machine's load drifts over a
round's cells alike). Prints the machine's cores, load average before and after, and every
setting. A benchmark, not a test: it checks only that every task was transitioned.
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

Cell = dict[str, float]


# -- servers --------------------------------------------------------------------------------------
def _serve_stock(argv: list[str]) -> None:
    """``tracker serve ARGV`` with uvicorn's own protocol class for ``--http``, by name, as
    ``uvicorn.Config(http="httptools")`` loads it, and the application as it is: no guard."""
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    from tracker_client.serve import connections
    from worker.cli import main

    class Stock(connections.ConnectionGuard):
        """No deadlines, no caps: uvicorn's protocol and the app, unchanged."""

        def __init__(self, limits: connections.ConnectionLimits, http: str = "h11") -> None:
            super().__init__(limits, http)
            self.protocol = import_from_string(HTTP_PROTOCOLS[http])

        @staticmethod
        def wrap(app: Any) -> Any:
            return app

    setattr(connections, "ConnectionGuard", Stock)  # noqa: B010 (this process only)
    sys.argv = ["backlog-worker", "tracker", "serve", *argv]
    main()


class _Server:
    """One ``tracker serve`` of the run: its process, URL and rail file."""

    def __init__(self, tmp: Path, kind: str, tree: Path, http: str) -> None:
        self.kind = kind
        self.db = tmp / f"{kind}.db"
        args = ["--tracker", f"sqlite://{self.db}", "--port", "0", "--create", "--http", http]
        entry = ["worker", "tracker", "serve"]
        if kind == "stock":
            entry = ["bench.transport", "--serve-stock"]
        log = self.db.with_suffix(".log")
        with log.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", *entry, *args],
                cwd=tree,
                env=worker_env(str(tree)),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.url = listening_url(self.proc, log, f"tracker serve ({kind})")

    def stop(self) -> None:
        """SIGTERM, then wait."""
        self.proc.terminate()
        self.proc.wait(30)


# -- one drain ------------------------------------------------------------------------------------
def _drain(server: _Server, tree: Path, tmp: Path, role: str, n: int, concurrency: int) -> Cell:
    """One worker of the source tree ``tree`` drains ``n`` no-op tasks of ``role`` through
    ``server`` (none: an empty role, for the worker's start-up cost)."""
    if n:
        anyio.run(_seed, server.url, role, n)
    config = noop_config(
        tmp / f"{role}.toml", server.url, concurrency=concurrency, role=role, idle_max_s=0.5
    )
    log = tmp / f"{role}.log"
    server_before = _cpu_s(server.proc.pid)
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config)],
            cwd=tree,
            env=worker_env(str(tree)),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    [(rss_mib, worker_cpu)] = reap([proc])
    server_cpu = _cpu_s(server.proc.pid) - server_before
    if proc.returncode != 0:
        raise SystemExit(f"worker ({role}) exited {proc.returncode}: {log.read_text()[-2000:]}")
    if not n:
        return {"worker_cpu_s": worker_cpu}
    with sqlite3.connect(f"file:{server.db}?mode=ro", uri=True) as conn:
        first, last, done = conn.execute(
            "SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM runs "
            "WHERE status = 'completed' AND agent_role = ?",
            (role,),
        ).fetchone()
    if done != n:
        raise SystemExit(f"{role}: transitioned {done} of {n} tasks")
    span = (last - first) / 1000
    return {
        "tasks_per_s": n / span if span else float("inf"),
        "worker_cpu_s": worker_cpu,
        "worker_us": worker_cpu * 1e6 / n,
        "server_us": server_cpu * 1e6 / n,
        "rss_mib": rss_mib,
    }


# -- the run --------------------------------------------------------------------------------------
def _rounds(
    args: argparse.Namespace,
    servers: dict[str, _Server],
    clients: dict[str, Path],
    tmp: Path,
) -> list[dict[str, Cell]]:
    """Every round's cells (keyed ``client/server``) and start-up runs (``client/empty``)."""
    cells = [(client, server) for server in servers for client in clients]
    rounds = []
    for rnd in range(args.rounds):
        seen: dict[str, Cell] = {}
        shift = rnd % len(cells)
        for client, server in cells[shift:] + cells[:shift]:
            role = f"{client}{server}{rnd}"
            tree = clients[client]
            cell = _drain(servers[server], tree, tmp, role, args.tasks, args.concurrency)
            seen[f"{client}/{server}"] = cell
            print(
                f"  round {rnd + 1} {client:>6}/{server:<7}: {cell['tasks_per_s']:6.0f} tasks/s,"
                f" worker {cell['worker_us']:4.0f} us/task, server {cell['server_us']:4.0f}"
                " us/task",
                file=sys.stderr,
                flush=True,
            )
        order = list(clients) if rnd % 2 == 0 else list(clients)[::-1]
        for client in order:
            empty = _drain(
                servers["guarded"], clients[client], tmp, f"{client}empty{rnd}", 0, args.concurrency
            )
            seen[f"{client}/empty"] = empty
        for client, server in cells:
            cell = seen[f"{client}/{server}"]
            startup = seen[f"{client}/empty"]["worker_cpu_s"]
            cell["worker_net_us"] = (cell["worker_cpu_s"] - startup) * 1e6 / args.tasks
        rounds.append(seen)
    return rounds


def _median(rounds: list[dict[str, Cell]], cell: str, key: str) -> float:
    return statistics.median(r[cell][key] for r in rounds)


def _ratio(rounds: list[dict[str, Cell]], a: str, b: str, key: str) -> str:
    """Median over rounds of ``a``'s ``key`` over ``b``'s (each round's own pair)."""
    values = [r[a][key] / r[b][key] for r in rounds if r[b][key]]
    return f"{statistics.median(values):.2f}x" if values else "-"


def _versions() -> str:
    found = []
    for name in ("httpx", "httpcore", "h11", "uvicorn", "httptools", "uvloop", "anyio"):
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} -")
    return ", ".join(found)


def _pairs(servers: list[str], clients: list[str]) -> list[tuple[str, str, str]]:
    """(what, cell A, cell B) of every path compared: A over B."""
    pairs = [
        (f"server: guarded / stock, {client} client", f"{client}/guarded", f"{client}/stock")
        for client in clients
    ]
    if "before" in servers:
        pairs += [
            (f"server: before / guarded, {client} client", f"{client}/before", f"{client}/guarded")
            for client in clients
        ]
        pairs += [
            (f"client: before / this, {server} server", f"before/{server}", f"this/{server}")
            for server in servers
        ]
    return pairs


def _print(
    args: argparse.Namespace, rounds: list[dict[str, Cell]], servers: list[str], load: list[str]
) -> None:
    clients = ["this", "before"] if args.before else ["this"]
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else os.cpu_count()
    print(
        f"settings: {args.tasks} tasks per cell, {args.rounds} rounds (cells rotated per round),"
        f" 1 worker process, concurrency {args.concurrency}, drain mode, python executor doing"
        f" nothing; tracker serve --http {args.http} on 127.0.0.1 (SQLite, uvloop where"
        " installed); the served extensions (keep-alive, claim_many, finish_many) in use"
    )
    print(f"this tree: {ROOT}; before: {args.before or '-'}")
    print(f"machine: {cores} cores, Python {platform.python_version()}, {platform.platform()}")
    print(f"versions: {_versions()}")
    print(f"load average (1, 5, 15 min): before {load[0]}, after {load[1]}")
    print()
    print(
        f"{'client/server':<16}{'tasks/s':>9}{'worker us/task':>16}{'net of start-up':>17}"
        f"{'server us/task':>16}{'worker RSS MiB':>16}"
    )
    for server in servers:
        for client in clients:
            key = f"{client}/{server}"
            print(
                f"{key:<16}{_median(rounds, key, 'tasks_per_s'):>9.0f}"
                f"{_median(rounds, key, 'worker_us'):>16.0f}"
                f"{_median(rounds, key, 'worker_net_us'):>17.0f}"
                f"{_median(rounds, key, 'server_us'):>16.0f}"
                f"{_median(rounds, key, 'rss_mib'):>16.1f}"
            )
    for client in clients:
        startup = _median(rounds, f"{client}/empty", "worker_cpu_s")
        print(f"{client} worker start-up CPU: {startup:.2f} s")
    print()
    print("medians of per-round ratios (tasks/s: A over B; CPU: B's over A's, >1 = A cheaper)")
    print(f"{'A / B':<42}{'tasks/s':>9}{'worker CPU':>12}{'net':>8}{'server CPU':>12}")
    for name, a, b in _pairs(servers, clients):
        print(
            f"{name:<42}{_ratio(rounds, a, b, 'tasks_per_s'):>9}"
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
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        metavar="DIR",
        help="an older source tree: its server and its worker join the grid",
    )
    args = parser.parse_args()
    if args.before is not None and not (args.before / "worker" / "cli").is_dir():
        parser.error(f"--before {args.before}: not a source tree of this project")
    clients = {"this": ROOT}
    kinds = {"guarded": ROOT, "stock": ROOT}
    if args.before is not None:
        clients["before"] = kinds["before"] = args.before.resolve()
    load = [", ".join(f"{x:.2f}" for x in os.getloadavg())]
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        servers: dict[str, _Server] = {}
        try:
            for kind, tree in kinds.items():
                servers[kind] = _Server(tmp, kind, tree, args.http)
            rounds = _rounds(args, servers, clients, tmp)
        finally:
            for server in servers.values():
                server.stop()
    load.append(", ".join(f"{x:.2f}" for x in os.getloadavg()))
    _print(args, rounds, list(kinds), load)


if __name__ == "__main__":
    main()
