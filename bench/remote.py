"""Throughput against the served tracker: a raw HTTP client, the RemoteTracker, and the worker.

    python -m bench.remote [--tasks 500] [--concurrency 4] [--skip-worker]
                           [--phases raw,raw-ka,client,worker]

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

Run it from a worktree of an older commit too, in the same period, to compare before/after.

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

from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker


def _pipeline(role: str) -> dict[str, Any]:
    return {
        "initial": "todo",
        "states": {"todo": {"agent_role": role}, "done": {"terminal": True}},
        "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
    }


def _start_server(db: Path) -> tuple[subprocess.Popen[bytes], str]:
    log = db.with_suffix(".log")
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "worker",
                "tracker",
                "serve",
                "--tracker",
                f"sqlite://{db}",
                "--port",
                "0",
                "--create",  # a fresh rail file (serve refuses a missing rail without it)
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            raise SystemExit(f"tracker serve exited with {proc.returncode}: {log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("tracker serve did not start listening")


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
    await _seed(url, role, n)
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
    config = tmp / f"{role}.toml"
    config.write_text(
        f"""
log_level = "WARNING"
[tracker]
url = "{url}"
[worker]
concurrency = {concurrency}
drain = true
idle_min_s = 0.05
idle_max_s = 0.5
lease_ttl_s = 60
[[roles]]
name = "{role}"
executor = "python"
[roles.options]
callable = "bench.worker:noop"
"""
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


def main() -> None:
    """Run the phases and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--skip-worker", action="store_true")
    parser.add_argument("--phases", default="raw,raw-ka,client,worker")
    args = parser.parse_args()
    n, c = args.tasks, args.concurrency
    phases = set(args.phases.split(","))
    if args.skip_worker:
        phases.discard("worker")
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "served.db"
        server, url = _start_server(db)
        try:
            results: dict[str, dict[str, Any]] = {}
            results["raw x1"] = anyio.run(_phase, url, "raw", "raw1", n, 1)
            results[f"raw x{c}"] = anyio.run(_phase, url, "raw", "rawc", n, c)
            for kind in ("raw-ka", "client"):
                if kind in phases:
                    role = kind.replace("-", "")
                    results[f"{kind} x1"] = anyio.run(_phase, url, kind, f"{role}1", n, 1)
                    results[f"{kind} x{c}"] = anyio.run(_phase, url, kind, f"{role}c", n, c)
            if "worker" in phases:
                results["worker c=1"] = _worker_phase(url, db, tmp, "worker1", n, 1, server.pid)
                results[f"worker c={c}"] = _worker_phase(url, db, tmp, "workerc", n, c, server.pid)
        finally:
            server.terminate()
            server.wait(30)
    print(f"served tracker, {n} tasks per phase, cycle = claim -> 1 event -> transition")
    print(
        f"{'phase':<14}{'tasks/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'vs raw':>9}"
        f"{'worker CPU ms/task':>20}{'server CPU ms/task':>20}"
    )
    for name, r in results.items():
        base = results["raw x1"] if name.endswith("1") else results[f"raw x{c}"]
        ratio = r["tasks_per_s"] / base["tasks_per_s"]
        p50 = f"{r['p50_ms']:.2f}" if "p50_ms" in r else "-"
        p99 = f"{r['p99_ms']:.2f}" if "p99_ms" in r else "-"
        wcpu = f"{r['worker_cpu_ms']:.2f}" if "worker_cpu_ms" in r else "-"
        scpu = f"{r['server_cpu_ms']:.2f}" if "server_cpu_ms" in r else "-"
        print(
            f"{name:<14}{r['tasks_per_s']:>10.1f}{p50:>9}{p99:>9}{ratio:>9.2f}{wcpu:>20}{scpu:>20}"
        )


if __name__ == "__main__":
    main()
