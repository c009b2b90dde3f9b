"""Throughput against the served tracker: a raw HTTP client, the RemoteTracker, and the worker.

    python -m bench.remote [--tasks 500] [--concurrency 4] [--skip-worker]
                           [--phases raw,raw-ka,client,worker] [--rounds 1]
                           [--ab OLD_TREE] [--server-arg=--http=h11 ...]

One ``backlog-worker tracker serve`` process on 127.0.0.1 (its own SQLite file in a temp dir)
serves every phase; each phase drains its own pipeline (own role) of N no-op tasks through the
cycle claim -> 1 event -> transition:

1. ``raw``: a minimal httpx client, one connection per request (as the NullTickets contract
   requires), sequential; then ``--concurrency`` loops at once;
2. ``raw-ka``: the same minimal client on persistent connections (what the served tracker's
   ``keep_alive`` extension allows): the wire's ceiling for this cycle;
3. ``client``: the same cycle through ``RemoteTracker`` (size guard, idempotency keys, error
   mapping, retries; keep-alive when the server advertises it), sequential and concurrent;
4. ``worker``: ``python -m worker run`` (drain mode, ``python`` executor doing nothing) with
   concurrency 1 and ``--concurrency``; throughput from the rail's own run timestamps (it
   claims free slots together with ``claim_many`` where the server advertises it).

Before/after in one run: ``--ab /tmp/wt-old`` (a ``git worktree`` of the older commit) starts a
second server from that tree beside this tree's; every phase runs on each in turn (``--rounds``
times, alternating which goes first) with the same clients and worker, and the table gives both
sides' medians and their ratios. A phase left out of ``--phases`` is not run (``raw`` is the base
of the "vs raw" column).

Prints tasks/s, per-cycle p50/p99 (ms), the ratios to the raw client and, for the worker, the
CPU time per task of the worker and of the server (less sensitive than tasks/s to a busy
machine). A benchmark, not a test: it checks only that every task was transitioned.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.worker import noop_config
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker


def _pipeline(role: str) -> dict[str, Any]:
    return {
        "initial": "todo",
        "states": {"todo": {"agent_role": role}, "done": {"terminal": True}},
        "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
    }


def serve_command(db: Path, *extra: str) -> list[str]:
    """The command of ``tracker serve`` on the SQLite rail ``db``, on a free port of 127.0.0.1
    (it prints the address it listens on), with ``extra`` arguments."""
    return [sys.executable, "-m", "worker", "tracker", "serve", "--tracker", f"sqlite://{db}",
            "--port", "0", *extra]  # fmt: skip


def _start_server(
    db: Path,
    root: Path | None = None,
    extra: list[str] | None = None,
    *,
    new_session: bool = False,
) -> tuple[subprocess.Popen[bytes], str]:
    """``tracker serve`` on a fresh rail file; from the source tree ``root`` when given (an
    older commit's worktree: the A/B switch), else from this one. ``new_session``: in a process
    group of its own (for a bench that stops its processes with ``os.killpg``)."""
    log = db.with_suffix(".log")
    env = dict(os.environ)
    if root is not None:
        env["PYTHONPATH"] = str(root)
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            # --create: a fresh rail file (serve refuses a missing rail without it)
            serve_command(db, "--create", *(extra or [])),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=root,
            env=env,
            start_new_session=new_session,
        )
    return proc, listening_url(proc, log, "tracker serve")


def listening_url(
    proc: subprocess.Popen[bytes], log: Path, what: str, *, timeout_s: float = 30
) -> str:
    """The ``http://127.0.0.1:PORT`` a server process started by a bench says in ``log`` it
    listens on (within ``timeout_s``; SystemExit naming ``what`` if it exits or stays
    silent)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}: {log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{what} did not start listening")


async def _seed(url: str, role: str, n: int) -> None:
    tracker = RemoteTracker(url)
    try:
        pid = await tracker.create_pipeline(f"bench-{role}", _pipeline(role))
        await tracker.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(n)])
    finally:
        await tracker.aclose()


# -- raw client -----------------------------------------------------------------------------------
async def _raw_loop(url: str, role: str, agent: str, cycles: list[float]) -> int:
    """claim -> event -> transition with bare httpx, one connection per request."""
    limits = httpx.Limits(max_keepalive_connections=0)
    headers = {"Connection": "close"}
    async with httpx.AsyncClient(base_url=url, limits=limits, headers=headers) as c:
        return await _raw_cycles(c, role, agent, cycles)


async def _raw_ka_loop(url: str, role: str, agent: str, cycles: list[float]) -> int:
    """claim -> event -> transition with bare httpx on one persistent connection."""
    async with httpx.AsyncClient(base_url=url) as c:
        return await _raw_cycles(c, role, agent, cycles)


async def _raw_cycles(c: httpx.AsyncClient, role: str, agent: str, cycles: list[float]) -> int:
    done = 0
    while True:
        t0 = time.perf_counter()
        claim = await c.post(
            "/leases/claim",
            json={"agent_id": agent, "agent_role": role, "lease_ttl_ms": 60_000},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        if claim.status_code == 204:
            return done
        claim.raise_for_status()
        lease = claim.json()
        auth = {"Authorization": f"Bearer {lease['lease_token']}"}
        run = lease["run"]["id"]
        (
            await c.post(f"/runs/{run}/events", json={"kind": "step", "data": {}}, headers=auth)
        ).raise_for_status()
        (
            await c.post(
                f"/runs/{run}/transition",
                json={"trigger": "complete"},
                headers={**auth, "Idempotency-Key": str(uuid.uuid4())},
            )
        ).raise_for_status()
        cycles.append(time.perf_counter() - t0)
        done += 1


# -- RemoteTracker --------------------------------------------------------------------------------
async def _client_loop(url: str, role: str, agent: str, cycles: list[float]) -> int:
    tracker = RemoteTracker(url)
    done = 0
    try:
        while True:
            t0 = time.perf_counter()
            lease = await tracker.claim(agent, role, 60_000)
            if lease is None:
                return done
            await tracker.add_event(lease, "step", {})
            await tracker.transition(
                lease, "complete", expected_stage="todo", expected_task_version=1
            )
            cycles.append(time.perf_counter() - t0)
            done += 1
    finally:
        await tracker.aclose()


async def _phase(url: str, kind: str, role: str, n: int, loops: int) -> dict[str, Any]:
    cycles: list[float] = []
    counts: list[int] = []
    loop = {"raw": _raw_loop, "raw-ka": _raw_ka_loop}.get(kind, _client_loop)

    async def one(i: int) -> None:
        counts.append(await loop(url, role, f"{kind}-{i}", cycles))

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(loops):
            tg.start_soon(one, i)
    span = time.perf_counter() - start
    if sum(counts) != n:
        raise SystemExit(f"{kind}: transitioned {sum(counts)} of {n} tasks")
    cycles.sort()
    return {
        "tasks_per_s": n / span,
        "p50_ms": statistics.median(cycles) * 1000,
        "p99_ms": cycles[int(len(cycles) * 0.99) - 1] * 1000,
    }


# -- worker ---------------------------------------------------------------------------------------
def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _worker_phase(
    url: str, db: Path, tmp: Path, role: str, n: int, concurrency: int, server_pid: int
) -> dict[str, Any]:
    anyio.run(_seed, url, role, n)
    config = noop_config(
        tmp / f"{role}.toml", url, concurrency=concurrency, role=role, idle_max_s=0.5
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    server_cpu = _cpu_s(server_pid)
    children = os.times()
    proc = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    after = os.times()
    worker_cpu = after.children_user + after.children_system
    worker_cpu -= children.children_user + children.children_system
    server_cpu = _cpu_s(server_pid) - server_cpu
    if proc.returncode != 0:
        raise SystemExit(f"worker exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        first, last, done = conn.execute(
            "SELECT min(r.started_at_ms), max(r.ended_at_ms), count(*) FROM runs r "
            "WHERE r.status = 'completed' AND r.agent_role = ?",
            (role,),
        ).fetchone()
    if done != n:
        raise SystemExit(f"worker: transitioned {done} of {n} tasks")
    span = (last - first) / 1000
    return {
        "tasks_per_s": n / span if span else float("inf"),
        "worker_cpu_ms": worker_cpu * 1000 / n,
        "server_cpu_ms": server_cpu * 1000 / n,
    }


class _Served:
    """One ``tracker serve`` of the run: its process, URL and rail file."""

    def __init__(self, tmp: Path, name: str, root: Path | None, extra: list[str]) -> None:
        self.db = tmp / f"{name}.db"
        self.proc, self.url = _start_server(self.db, root, extra)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then wait)."""
        self.proc.terminate()
        self.proc.wait(30)


def _phases(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(row name, kind, loops) of every phase asked for, in order."""
    phases = set(args.phases.split(","))
    if args.skip_worker:
        phases.discard("worker")
    c = args.concurrency
    rows = []
    for kind in ("raw", "raw-ka", "client", "worker"):
        if kind in phases:
            sep = " c=" if kind == "worker" else " x"
            rows += [(f"{kind}{sep}1", kind, 1), (f"{kind}{sep}{c}", kind, c)]
    return rows


def _run(served: _Served, tmp: Path, kind: str, role: str, n: int, loops: int) -> dict[str, Any]:
    if kind == "worker":
        return _worker_phase(served.url, served.db, tmp, role, n, loops, served.proc.pid)
    anyio.run(_seed, served.url, role, n)
    before = _cpu_s(served.proc.pid)
    result = anyio.run(_phase, served.url, kind, role, n, loops)
    result["server_cpu_ms"] = (_cpu_s(served.proc.pid) - before) * 1000 / n
    return result


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else None


def _cell(value: float | None, width: int, digits: int = 2) -> str:
    return f"{'-' if value is None else f'{value:.{digits}f}':>{width}}"


def _print_table(
    rows: list[tuple[str, str, int]], results: dict[str, list[dict[str, Any]]]
) -> None:
    print(
        f"{'phase':<14}{'tasks/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'vs raw':>9}"
        f"{'worker CPU ms/task':>20}{'server CPU ms/task':>20}"
    )
    for name, _kind, loops in rows:
        runs = results[name]
        rate = _median(runs, "tasks_per_s")
        base = results.get(f"raw x{loops}")
        ratio = None if base is None or rate is None else rate / (_median(base, "tasks_per_s") or 1)
        print(
            f"{name:<14}{_cell(rate, 10, 1)}{_cell(_median(runs, 'p50_ms'), 9)}"
            f"{_cell(_median(runs, 'p99_ms'), 9)}{_cell(ratio, 9)}"
            f"{_cell(_median(runs, 'worker_cpu_ms'), 20)}"
            f"{_cell(_median(runs, 'server_cpu_ms'), 20)}"
        )


def _print_ab(
    rows: list[tuple[str, str, int]],
    old: dict[str, list[dict[str, Any]]],
    new: dict[str, list[dict[str, Any]]],
) -> None:
    print(
        f"{'phase':<14}{'tasks/s A':>11}{'B':>9}{'B/A':>7}{'server CPU ms A':>17}{'B':>7}{'B/A':>7}"
    )
    for name, _, _ in rows:
        ra, rb = _median(old[name], "tasks_per_s"), _median(new[name], "tasks_per_s")
        ca, cb = _median(old[name], "server_cpu_ms"), _median(new[name], "server_cpu_ms")
        print(
            f"{name:<14}{_cell(ra, 11, 1)}{_cell(rb, 9, 1)}{_cell((rb or 0) / (ra or 1), 7)}"
            f"{_cell(ca, 17)}{_cell(cb, 7)}{_cell((ca or 0) / (cb or 1), 7)}"
        )
    print("B/A: tasks/s of B over A; server CPU: A's over B (how many times less CPU B uses)")


def main() -> None:
    """Run the phases and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--skip-worker", action="store_true")
    parser.add_argument("--phases", default="raw,raw-ka,client,worker")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each phase (median shown)")
    parser.add_argument(
        "--server-root",
        type=Path,
        default=None,
        help="run tracker serve from this source tree (the clients and the worker stay this"
        " tree's)",
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="one more argument for tracker serve (repeatable), e.g. --server-arg=--http=h11",
    )
    parser.add_argument(
        "--ab",
        type=Path,
        default=None,
        metavar="ROOT",
        help="A/B in one run: a second server A from the source tree ROOT (e.g. a worktree of an"
        " older commit) beside B (this tree, or --server-root); each phase alternates A, B",
    )
    parser.add_argument(
        "--ab-arg", action="append", default=[], help="one more argument for server A"
    )
    args = parser.parse_args()
    n = args.tasks
    rows = _phases(args)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {"A": {}, "B": {}}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        servers: dict[str, _Served] = {}
        try:
            servers["B"] = _Served(tmp, "served", args.server_root, args.server_arg)
            if args.ab is not None:
                servers["A"] = _Served(tmp, "served-a", args.ab, args.ab_arg)
            for rnd in range(args.rounds):
                for name, kind, loops in rows:
                    for side in sorted(servers, reverse=rnd % 2 == 1):  # A first, then B first
                        role = f"{kind.replace('-', '')}{loops}{side}{rnd}".lower()
                        run = _run(servers[side], tmp, kind, role, n, loops)
                        results[side].setdefault(name, []).append(run)
        finally:
            for served in servers.values():
                served.stop()
    print(f"served tracker, {n} tasks per phase, cycle = claim -> 1 event -> transition")
    if args.ab is None:
        if args.server_root is not None or args.server_arg:
            print(f"server from {args.server_root or 'this tree'} {' '.join(args.server_arg)}")
        _print_table(rows, results["B"])
        return
    print(f"A: server from {args.ab} {' '.join(args.ab_arg)}")
    print(f"B: server from {args.server_root or 'this tree'} {' '.join(args.server_arg)}")
    print(f"medians of {args.rounds} round(s), the sides alternating which goes first")
    for side in ("A", "B"):
        print(f"-- {side}")
        _print_table(rows, results[side])
    _print_ab(rows, results["A"], results["B"])


if __name__ == "__main__":
    main()
