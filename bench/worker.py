"""Worker throughput, memory, idle cost and idle pickup latency on the embedded tracker.

    python -m bench.worker [--tasks 5000] [--concurrency 10] [--phases drain1,drain2,idle]

Phases (each on a fresh SQLite file in a temp dir, workers as real ``python -m worker run``):
1. one worker process drains N no-op tasks (``python`` executor -> :func:`noop`);
2. two worker processes drain N no-op tasks together;
3. one idle worker: CPU used over 5 s, and the latency from creating a task to its claim
   (20 samples, the worker idle before each).
Throughput is measured on the tracker's own timestamps (first claim -> last transition), so
process start-up is excluded; peak RSS and the worker's CPU time (user + system, per task: a
figure that stays comparable on a busy machine where tasks/s does not) come from ``wait4``.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.rss import reap
from plugins.api import ExecutionContext, Outcome, Transition
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "bench"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}

PHASES = ("drain1", "drain2", "idle")


async def noop(ctx: ExecutionContext) -> Outcome:
    """The benchmark's executor: do nothing, succeed."""
    return Transition()


def _config(tmp: Path, db: Path, concurrency: int, drain: bool) -> Path:
    path = tmp / "bench.toml"
    path.write_text(
        f"""
log_level = "WARNING"
[tracker]
url = "sqlite:///{db}"
[worker]
concurrency = {concurrency}
drain = {"true" if drain else "false"}
idle_min_s = 0.05
idle_max_s = 2.0
lease_ttl_s = 60
[[roles]]
name = "bench"
executor = "python"
[roles.options]
callable = "bench.worker:noop"
"""
    )
    return path


async def _seed(db: Path, n: int) -> str:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("bench", PIPELINE)
        for start in range(0, n, 500):
            batch = [
                TaskCreate(pipeline_id=pid, title=f"t{i}")
                for i in range(start, min(n, start + 500))
            ]
            await tracker.create_tasks(batch)
        return pid
    finally:
        await tracker.aclose()


def _spawn(config: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, "-m", "worker", "run", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait(proc: subprocess.Popen[bytes]) -> tuple[float, float]:
    """Reap ``proc``: (its own peak RSS in MiB, CPU seconds user + system). The peak is its
    ``VmHWM``, sampled (:mod:`bench.rss`): ``wait4``'s ``ru_maxrss`` counts the forked copy of
    this benchmark process too."""
    return reap([proc])[0]


def _drain(n: int, procs: int, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "rail.db"
        anyio.run(_seed, db, n)
        config = _config(tmp, db, concurrency, drain=True)
        wall = time.perf_counter()
        workers = [_spawn(config) for _ in range(procs)]
        reaped = reap(workers)
        wall = time.perf_counter() - wall
        with sqlite3.connect(db) as conn:
            first, last, done = conn.execute(
                "SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM runs "
                "WHERE status = 'completed'"
            ).fetchone()
        span = (last - first) / 1000
        return {
            "procs": procs,
            "done": done,
            "tasks_per_s": done / span if span else float("inf"),
            "span_s": span,
            "wall_s": wall,
            "peak_rss_mib": max(rss for rss, _ in reaped),
            "cpu_us_per_task": sum(cpu for _, cpu in reaped) / done * 1e6 if done else 0.0,
            "exit_codes": [p.returncode for p in workers],
        }


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


async def _pickup_samples(db: Path, pipeline_id: str, samples: int) -> list[float]:
    tracker = await open_tracker(f"sqlite:///{db}")
    out: list[float] = []
    try:
        for i in range(samples):
            await anyio.sleep(random.uniform(0.5, 1.5))  # let the worker back off into idle
            created = time.time()
            task_id = await tracker.create_task(TaskCreate(pipeline_id=pipeline_id, title=f"p{i}"))
            while True:
                detail = await tracker.get_task(task_id)
                if detail.latest_run is not None:
                    out.append(detail.latest_run.started_at_ms / 1000 - created)
                    break
                await anyio.sleep(0.002)
    finally:
        await tracker.aclose()
    return out


def _idle(samples: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "rail.db"
        pipeline_id = anyio.run(_seed, db, 0)
        proc = _spawn(_config(tmp, db, 4, drain=False))
        try:
            time.sleep(3)  # start-up and back-off to the idle ceiling (a benchmark, not a test)
            cpu0, t0 = _cpu_seconds(proc.pid), time.monotonic()
            time.sleep(5)
            idle_cpu = (_cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
            latencies = anyio.run(_pickup_samples, db, pipeline_id, samples)
        finally:
            proc.terminate()
            proc.wait(30)
        latencies.sort()
        return {
            "idle_cpu_pct": idle_cpu * 100,
            "pickup_p50_ms": statistics.median(latencies) * 1000,
            "pickup_p95_ms": latencies[int(len(latencies) * 0.95) - 1] * 1000,
        }


def main() -> None:
    """Run the phases and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--pickup-samples", type=int, default=20)
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"comma-separated subset of {','.join(PHASES)} (default: all)",
    )
    args = parser.parse_args()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        parser.error(f"unknown phase {unknown[0]!r} (phases: {', '.join(PHASES)})")
    for procs in (1, 2):
        if f"drain{procs}" not in phases:
            continue
        r = _drain(args.tasks, procs, args.concurrency)
        print(
            f"drain {r['done']} no-op tasks, {procs} worker process(es) x concurrency "
            f"{args.concurrency}: {r['tasks_per_s']:.0f} tasks/s (span {r['span_s']:.2f}s, "
            f"wall incl. start-up {r['wall_s']:.2f}s), peak RSS {r['peak_rss_mib']:.1f} MiB, "
            f"worker CPU incl. start-up {r['cpu_us_per_task']:.0f} us/task, "
            f"exit codes {r['exit_codes']}"
        )
    if "idle" not in phases:
        return
    idle = _idle(args.pickup_samples)
    print(
        f"idle worker: CPU {idle['idle_cpu_pct']:.2f}% of a core; pickup latency "
        f"p50 {idle['pickup_p50_ms']:.1f} ms, p95 {idle['pickup_p95_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
