"""The worker against a stalling plain NullTickets server, next to a minimal reference worker.

    python -m bench.stall [--tasks 300] [--workers 2] [--concurrency 4] [--task-s 2.5]
                          [--ttl-s 2] [--hang-rate 0.01] [--hang-s 12] [--kills 0]
                          [--deadline-s 400] [--seed 1]

Each phase drains ``--tasks`` tasks of ``--task-s`` seconds each through ``--workers``
processes of ``--concurrency`` slots, with a lease TTL of ``--ttl-s``, on its own fresh rail:
a real ``backlog-worker tracker serve`` behind :class:`tests.faultproxy.FaultProxy` in
``plain_nulltickets`` mode (its heartbeat grants 300 s whatever was asked, its ``/health``
advertises nothing, so the worker sees a plain NullTickets server). The proxy holds a seeded
``--hang-rate`` of all requests for ``--hang-s`` seconds, then forwards them (a tracker that
gets unstuck and handles them late); the same seed gives both phases the same fault pattern.
``--kills N`` also kills (SIGKILL) a worker process N times, evenly over the reference's
expected time, restarting it at once. A task lasts several heartbeats (every TTL/3): the trap
needs a heartbeat to hang after an earlier one landed.

1. ``worker``: ``python -m worker run`` (the ``python`` executor sleeping ``--task-s``), its
   default request timeout (10 s) and retries;
2. ``reference``: :func:`reference_worker` (``python -m bench.stall reference ...``): claim,
   heartbeat every TTL/3 beside the work, transition, with bare httpx and a 30 s timeout (longer
   than a hang: a hung call simply waits), no retries: a request that fails is dropped.

Prints, per phase: the total time from the workers' start until every task is done, the runs
by how they ended, the runs abandoned to their lease's expiry (``stale``) and the longest of
those, the tasks still held at the end; then the ratio worker/reference and the machine's load
average. A benchmark, not a test: it checks only that every task got done before the deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.remote import _pipeline, _start_server
from bench.worker import noop_config
from plugins.api import ExecutionContext, Outcome, Transition
from tests.faultproxy import FaultProxy, Hang
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker

ROLE = "coder"
#: How long one task works (the worker's executor reads it from its environment).
TASK_ENV = "BENCH_STALL_TASK_S"


async def work(ctx: ExecutionContext) -> Outcome:
    """The benchmark's executor: work ``$BENCH_STALL_TASK_S`` seconds, then succeed."""
    await asyncio.sleep(float(os.environ.get(TASK_ENV, "1")))
    return Transition()


# -- the minimal reference worker ------------------------------------------------------------------
async def _reference_slot(c: httpx.AsyncClient, agent: str, ttl_s: float, task_s: float) -> None:
    """One slot: claim, work with heartbeats every TTL/3, transition; forever."""
    while True:
        try:
            claim = await c.post(
                "/leases/claim",
                json={"agent_id": agent, "agent_role": ROLE, "lease_ttl_ms": int(ttl_s * 1000)},
            )
        except httpx.HTTPError:
            continue
        if claim.status_code != 200:
            await asyncio.sleep(0.2)
            continue
        lease = claim.json()
        auth = {"Authorization": f"Bearer {lease['lease_token']}"}

        async def beat(lease_id: str = lease["lease_id"], auth: dict[str, str] = auth) -> None:
            while True:
                await asyncio.sleep(ttl_s / 3)
                with contextlib.suppress(httpx.HTTPError):
                    await c.post(f"/leases/{lease_id}/heartbeat", json={}, headers=auth)

        beats = asyncio.create_task(beat())
        await asyncio.sleep(task_s)
        beats.cancel()
        with contextlib.suppress(httpx.HTTPError):
            await c.post(
                f"/runs/{lease['run']['id']}/transition",
                json={"trigger": "complete"},
                headers={**auth, "Idempotency-Key": str(uuid.uuid4())},
            )


async def reference_worker(url: str, agent: str, slots: int, ttl_s: float, task_s: float) -> None:
    """The minimal worker: ``slots`` loops of :func:`_reference_slot`, one connection per
    request (as a plain NullTickets server wants), until killed."""
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=30.0, limits=limits) as c:
        await asyncio.gather(
            *(_reference_slot(c, f"{agent}-{i}", ttl_s, task_s) for i in range(slots))
        )


# -- one phase -------------------------------------------------------------------------------------
async def _seed(url: str, n: int) -> None:
    tracker = RemoteTracker(url)
    try:
        pid = await tracker.create_pipeline("stall", _pipeline(ROLE))
        for start in range(0, n, 200):
            end = min(n, start + 200)
            await tracker.create_tasks(
                [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(start, end)]
            )
    finally:
        await tracker.aclose()


def _worker_config(path: Path, url: str, args: argparse.Namespace) -> Path:
    return noop_config(
        path,
        url,
        concurrency=args.concurrency,
        drain=False,
        role=ROLE,
        idle_max_s=0.5,
        lease_ttl_s=args.ttl_s,
        presence=False,
        callable_path="bench.stall:work",
    )


def _spawn(kind: str, i: int, url: str, config: Path, args: argparse.Namespace, log: Path) -> Any:
    if kind == "worker":
        argv = [sys.executable, "-m", "worker", "run", "--config", str(config)]
    else:
        argv = [sys.executable, "-m", "bench.stall", "reference", url, f"ref{i}"]
        argv += [str(args.concurrency), str(args.ttl_s), str(args.task_s)]
    env = {**os.environ, TASK_ENV: str(args.task_s)}
    with log.open("ab") as stderr:
        return subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env, start_new_session=True
        )


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
    proc.wait()


def _done(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM tasks WHERE stage = 'done'").fetchone()[0])


def _runs(db: Path) -> dict[str, Any]:
    now_ms = int(time.time() * 1000)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        statuses = Counter(s for (s,) in conn.execute("SELECT status FROM runs"))
        stale = [
            (e - s) / 1000
            for s, e in conn.execute(
                "SELECT started_at_ms, ended_at_ms FROM runs WHERE status = 'stale'"
            )
        ]
        held = conn.execute(
            "SELECT count(*) FROM tasks WHERE stage != 'done' AND lease_expires_at_ms > ?",
            (now_ms,),
        ).fetchone()[0]
    return {"runs": dict(statuses), "stale_max_s": max(stale, default=0.0), "held": held}


def phase(kind: str, args: argparse.Namespace, expected_s: float) -> dict[str, Any]:
    """Drain ``args.tasks`` tasks with ``kind`` workers (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix=f"stall-{kind}-") as tmp:
        db = Path(tmp) / "rail.db"
        server, url = _start_server(db, new_session=True)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            asyncio.run(_seed(url, args.tasks))
            hangs = [Hang("", rate=args.hang_rate, hang_s=args.hang_s)]
            proxy = FaultProxy(int(url.rsplit(":", 1)[1]), hangs=hangs, seed=args.seed)
            proxy.plain_nulltickets = True
            with proxy.start():
                config = _worker_config(Path(tmp) / "worker.toml", proxy.url, args)
                log = Path(tmp) / "workers.log"
                started = time.monotonic()
                procs = [_spawn(kind, i, proxy.url, config, args, log) for i in range(args.workers)]
                kills = [
                    started + expected_s * (k + 1) / (args.kills + 1) for k in range(args.kills)
                ]
                done = 0
                while done < args.tasks and time.monotonic() < started + args.deadline_s:
                    time.sleep(0.2)
                    if kills and time.monotonic() >= kills[0]:
                        kills.pop(0)
                        victim = len(kills) % args.workers
                        _stop(procs[victim])
                        procs[victim] = _spawn(kind, victim, proxy.url, config, args, log)
                    done = _done(db)
                total = time.monotonic() - started
                for proc in procs:
                    _stop(proc)
                stats = _runs(db)
                stats.update(kind=kind, total_s=total, done=done, hung=proxy.stats["hung"])
                stats["requests"] = len(proxy.seen)
                return stats
        finally:
            for proc in procs:
                _stop(proc)
            _stop(server, signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    """Run both phases and print the comparison (or, as ``reference ...``, be the reference)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["reference"]:
        url, agent, slots, ttl, task = argv[1:6]
        asyncio.run(reference_worker(url, agent, int(slots), float(ttl), float(task)))
        return
    p = argparse.ArgumentParser(prog="python -m bench.stall", description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=int, default=300)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--task-s", type=float, default=2.5)
    p.add_argument("--ttl-s", type=float, default=2.0)
    p.add_argument("--hang-rate", type=float, default=0.01)
    p.add_argument("--hang-s", type=float, default=12.0)
    p.add_argument("--kills", type=int, default=0)
    p.add_argument("--deadline-s", type=float, default=400.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers and workers too
    expected = args.tasks * args.task_s / (args.workers * args.concurrency)
    print(
        f"{args.tasks} tasks of {args.task_s:g}s, {args.workers} workers x {args.concurrency} "
        f"slots, TTL {args.ttl_s:g}s; {args.hang_rate:.1%} of requests hang {args.hang_s:g}s "
        f"(seed {args.seed}); {args.kills} kills; plain NullTickets (heartbeat grants 300 s); "
        f"load before {os.getloadavg()[0]:.2f}"
    )
    results = {}
    for kind in ("reference", "worker"):
        r = results[kind] = phase(kind, args, expected)
        print(
            f"{kind:>9}: {r['total_s']:7.1f}s  done {r['done']}/{args.tasks}  runs {r['runs']}  "
            f"stale max {r['stale_max_s']:.1f}s  held at end {r['held']}  "
            f"hung {r['hung']}/{r['requests']} requests"
        )
    ratio = results["worker"]["total_s"] / results["reference"]["total_s"]
    print(f"worker/reference: {ratio:.2f}x  load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
