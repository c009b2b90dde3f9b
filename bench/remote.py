"""Throughput against the served tracker: a raw HTTP client, the RemoteTracker, and the worker.

    python -m bench.remote [--tasks 500] [--concurrency 4] [--skip-worker]

One ``backlog-worker tracker serve`` process on 127.0.0.1 (its own SQLite file in a temp dir)
serves every phase; each phase drains its own pipeline (own role) of N no-op tasks through the
cycle claim -> 1 event -> transition:

1. ``raw``: a minimal httpx client, one connection per request (as the NullTickets contract
   requires), sequential; then ``--concurrency`` loops at once;
2. ``client``: the same cycle through ``RemoteTracker`` (size guard,
   idempotency keys, error mapping, retries), sequential and concurrent;
3. ``worker``: ``python -m worker run`` (drain mode, ``python`` executor doing nothing) with
   concurrency 1 and ``--concurrency``; throughput from the rail's own run timestamps.

Prints tasks/s, per-cycle p50/p99 (ms) and the ratios to the raw client. A benchmark, not a test:
it checks only that every task was transitioned.
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
    done = 0
    async with httpx.AsyncClient(base_url=url, limits=limits, headers={"Connection": "close"}) as c:
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
    loop = _raw_loop if kind == "raw" else _client_loop

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
def _worker_phase(
    url: str, db: Path, tmp: Path, role: str, n: int, concurrency: int
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
    proc = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
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
    return {"tasks_per_s": n / span if span else float("inf")}


def main() -> None:
    """Run the phases and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--skip-worker", action="store_true")
    args = parser.parse_args()
    n, c = args.tasks, args.concurrency
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "served.db"
        server, url = _start_server(db)
        try:
            results: dict[str, dict[str, Any]] = {}
            results["raw x1"] = anyio.run(_phase, url, "raw", "raw1", n, 1)
            results[f"raw x{c}"] = anyio.run(_phase, url, "raw", "rawc", n, c)
            results["client x1"] = anyio.run(_phase, url, "client", "client1", n, 1)
            results[f"client x{c}"] = anyio.run(_phase, url, "client", "clientc", n, c)
            if not args.skip_worker:
                results["worker c=1"] = _worker_phase(url, db, tmp, "worker1", n, 1)
                results[f"worker c={c}"] = _worker_phase(url, db, tmp, "workerc", n, c)
        finally:
            server.terminate()
            server.wait(30)
    print(f"served tracker, {n} tasks per phase, cycle = claim -> 1 event -> transition")
    print(f"{'phase':<14}{'tasks/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'vs raw':>9}")
    for name, r in results.items():
        base = results["raw x1"] if name.endswith("1") else results[f"raw x{c}"]
        ratio = r["tasks_per_s"] / base["tasks_per_s"]
        p50 = f"{r['p50_ms']:.2f}" if "p50_ms" in r else "-"
        p99 = f"{r['p99_ms']:.2f}" if "p99_ms" in r else "-"
        print(f"{name:<14}{r['tasks_per_s']:>10.1f}{p50:>9}{p99:>9}{ratio:>9.2f}")


if __name__ == "__main__":
    main()
