"""The worker over the wire against a raw client, in the same run (issue 16's wire targets).

    python -m bench.wire [--tasks 3000] [--concurrency 10] [--rounds 3] [--ab DIR]

Three phases per round, each draining its own N no-op tasks (claim -> transition):

* ``raw``: a minimal client (bare httpx, one connection per request, as the NullTickets contract
  has it; ``--concurrency`` loops) on a server that answers ``/health`` as a plain NullTickets
  server does (no extensions, no limits: the served app behind a middleware, run by uvicorn in
  a process of its own, like ``tracker serve``);
* ``worker-plain``: ``python -m worker run`` (concurrency N, ``python`` executor doing nothing)
  on that same plain server: what the worker gets from the plain protocol;
* ``worker-served``: the same worker through ``tracker serve`` with its extensions
  (keep-alive, claim_many, finish_many).

A real NullTickets server is not available here; the plain server is its stand-in for the
protocol (the same routes, one request per connection, no extension used). Throughput is the
rail's own run timestamps (first start -> last end). Rounds interleave the phases. Prints each
phase's median tasks/s, worker and server CPU per task, and the two ratios the issue sets
targets for: worker-plain / raw (>= 0.9) and worker-served / worker-plain (>= 4).

``--ab DIR``: an older source tree (``git worktree add /tmp/before HEAD~1``) whose worker runs
two more phases, ``ab-plain`` and ``ab-served``, on the same servers in the same rounds; the
ratios of this tree's worker to that one's are printed too (the before/after of a change).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import httpx

from bench.plain import PlainHealth
from bench.remote import _cpu_s, _seed, _start_server, listening_url
from bench.worker import noop_config

ROOT = Path(__file__).resolve().parents[1]


# -- the plain server (a process of its own) ------------------------------------------------------
def _serve_plain(db: str) -> None:
    """The plain server: the served app on ``db`` behind :class:`PlainHealth`; prints its URL."""
    import socket

    import uvicorn

    from tracker_client.embedded import EmbeddedTracker
    from tracker_client.serve.app import create_app

    async def main() -> None:
        tracker = await EmbeddedTracker.open(db)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
        config = uvicorn.Config(
            PlainHealth(create_app(tracker)), log_level="warning", lifespan="off"
        )
        await uvicorn.Server(config).serve([sock])

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        anyio.run(main)


def _start_plain(db: Path) -> tuple[subprocess.Popen[bytes], str]:
    log = db.with_suffix(".plain.log")
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.wire", "--serve-plain", str(db)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    return proc, listening_url(proc, log, "plain server")


# -- phases ------------------------------------------------------------------------------------
async def _raw(url: str, role: str, loops: int) -> None:
    """claim -> transition with bare httpx, one connection per request, ``loops`` at once."""

    async def loop(i: int) -> None:
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, limits=limits) as c:
            while True:
                claim = await c.post(
                    "/leases/claim",
                    json={"agent_id": f"raw-{i}", "agent_role": role, "lease_ttl_ms": 60_000},
                    headers={"Idempotency-Key": str(uuid.uuid4())},
                )
                if claim.status_code == 204:
                    return
                lease = claim.json()
                done = await c.post(
                    f"/runs/{lease['run']['id']}/transition",
                    json={"trigger": "complete"},
                    headers={
                        "Authorization": f"Bearer {lease['lease_token']}",
                        "Idempotency-Key": str(uuid.uuid4()),
                    },
                )
                done.raise_for_status()

    async with anyio.create_task_group() as tg:
        for i in range(loops):
            tg.start_soon(loop, i)


def _worker(url: str, tmp: Path, role: str, concurrency: int, root: Path = ROOT) -> float:
    """Drain ``role`` with a real worker process of the source tree ``root``; its CPU seconds."""
    config = noop_config(
        tmp / f"{role}.toml", url, concurrency=concurrency, role=role, idle_max_s=0.5
    )
    before = os.times()
    subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.DEVNULL,
        check=True,
    )
    after = os.times()
    return (after.children_user + after.children_system) - (
        before.children_user + before.children_system
    )


def _rate(db: Path, role: str, n: int) -> float:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        first, last, done = conn.execute(
            "SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM runs "
            "WHERE status = 'completed' AND agent_role = ?",
            (role,),
        ).fetchone()
    if done != n:
        raise SystemExit(f"{role}: {done} of {n} tasks done")
    return float(n / max((last - first) / 1000, 1e-9))


def _round(
    tmp: Path, k: int, n: int, c: int, ab: Path | None
) -> dict[str, tuple[float, float, float]]:
    out: dict[str, tuple[float, float, float]] = {}
    plain_db, served_db = tmp / f"plain{k}.db", tmp / f"served{k}.db"
    for db in (plain_db, served_db):  # both files made by tracker serve --create
        proc, _url = _start_server(db)
        proc.terminate()
        proc.wait()
    plain, plain_url = _start_plain(plain_db)
    served, served_url = _start_server(served_db)
    try:
        phases = [
            ("raw", plain_url, plain_db, plain),
            ("worker-plain", plain_url, plain_db, plain),
            ("worker-served", served_url, served_db, served),
        ]
        if ab is not None:
            phases += [
                ("ab-plain", plain_url, plain_db, plain),
                ("ab-served", served_url, served_db, served),
            ]
        for phase, url, db, proc in phases:
            role = phase.replace("-", "_")
            anyio.run(_seed, url, role, n)
            server_cpu = _cpu_s(proc.pid)
            if phase == "raw":
                cpu0 = time.process_time()
                anyio.run(_raw, url, role, c)
                own = time.process_time() - cpu0
            else:
                root = ab if ab is not None and phase.startswith("ab-") else ROOT
                own = _worker(url, tmp, role, c, root)
            server_cpu = _cpu_s(proc.pid) - server_cpu
            out[phase] = (_rate(db, role, n), own * 1000 / n, server_cpu * 1000 / n)
    finally:
        for proc in (plain, served):
            proc.terminate()
            proc.wait()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ab", type=Path, default=None, help="an older tree's worker too")
    parser.add_argument("--serve-plain", metavar="DB", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_plain:
        _serve_plain(args.serve_plain)
        return
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            rounds.append(_round(Path(tmp), k, args.tasks, args.concurrency, args.ab))
    print(
        f"{args.tasks} no-op tasks per phase, concurrency {args.concurrency}, {args.rounds} rounds"
    )
    print(f"{'phase':15}{'tasks/s':>10}{'client CPU ms/task':>20}{'server CPU ms/task':>20}")
    for phase in rounds[0]:
        rate, own, server = (statistics.median(r[phase][i] for r in rounds) for i in range(3))
        print(f"{phase:15}{rate:10.1f}{own:20.3f}{server:20.3f}")
    plain_vs_raw = statistics.median(r["worker-plain"][0] / r["raw"][0] for r in rounds)
    served_vs_plain = statistics.median(
        r["worker-served"][0] / r["worker-plain"][0] for r in rounds
    )
    print(f"worker-plain / raw:           {plain_vs_raw:.2f} (target >= 0.9)")
    print(f"worker-served / worker-plain: {served_vs_plain:.2f} (target >= 4)")
    if args.ab is not None:
        for mine, theirs in (("worker-plain", "ab-plain"), ("worker-served", "ab-served")):
            ratio = statistics.median(r[mine][0] / r[theirs][0] for r in rounds)
            print(f"{mine} / {theirs} ({args.ab}): {ratio:.2f}")


if __name__ == "__main__":
    main()
