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
The CPU is also split by thread (sampled from ``/proc/<pid>/task``): the event loop's (the main
thread: start-up, the claim loop, the runs) and the other threads' (the embedded rail's database
thread and its checkpointer), so a change shows which side it moved.

``--log-level INFO`` runs the drains' workers at the worker's own default level (two lines per
run through the secret-scrubbing filter) instead of WARNING, as every benchmark does.

Before/after in one run: ``--ab /tmp/wt-old --rounds 5`` (a ``git worktree`` of the older
commit) runs each drain phase with that tree's worker (A, seeded by that tree too) and with this
tree's (B) in turn, alternating which goes first, and prints both sides' medians and ratios.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
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


def noop_config(
    path: Path,
    url: str,
    *,
    concurrency: int,
    drain: bool = True,
    role: str = "bench",
    idle_max_s: float = 2.0,
    lease_ttl_s: float = 60,
    presence: bool = True,
    callable_path: str = "bench.worker:noop",
    log_level: str = "WARNING",
) -> Path:
    """Write the benchmarks' worker configuration to ``path``: one ``role`` running
    :func:`noop` (or another ``callable_path``) on the rail at ``url``, logging warnings only
    (or at ``log_level``: the default ``INFO`` writes two lines per run)."""
    no_presence = "" if presence else "presence = false\n"
    path.write_text(
        f"""
log_level = "{log_level}"
[tracker]
url = "{url}"
[worker]
concurrency = {concurrency}
drain = {"true" if drain else "false"}
idle_min_s = 0.05
idle_max_s = {idle_max_s}
lease_ttl_s = {lease_ttl_s:g}
{no_presence}[[roles]]
name = "{role}"
executor = "python"
[roles.options]
callable = "{callable_path}"
"""
    )
    return path


def _config(tmp: Path, db: Path, concurrency: int, drain: bool, log_level: str = "WARNING") -> Path:
    return noop_config(
        tmp / "bench.toml",
        f"sqlite:///{db}",
        concurrency=concurrency,
        drain=drain,
        log_level=log_level,
    )


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


#: This source tree (a worker of another tree is started with ``root``).
ROOT = Path(__file__).resolve().parents[1]


def worker_env(tree: str) -> dict[str, str]:
    """The environment of a worker of the source tree ``tree``: that tree first on the path,
    and bytecode caching allowed (an environment with ``PYTHONDONTWRITEBYTECODE`` otherwise
    has every worker compile the tree's ~120 modules from source at start-up, ~0.1 s of CPU,
    which an installed worker, like the peers from their installed packages, never pays)."""
    env = {**os.environ, "PYTHONPATH": tree}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _spawn(config: Path, root: Path | None = None) -> subprocess.Popen[bytes]:
    """A ``python -m worker run`` of this tree (or of the source tree ``root``)."""
    tree = str(root or ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "worker", "run", "--config", str(config)],
        env=worker_env(tree),
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _seed_with(root: Path, db: Path, n: int) -> None:
    """Seed ``db`` with the tracker of the source tree ``root`` (its own schema version)."""
    code = "import sys, anyio, pathlib, bench.worker as w; anyio.run(w._seed, "
    code += "pathlib.Path(sys.argv[1]), int(sys.argv[2]))"
    subprocess.run(
        [sys.executable, "-c", code, str(db), str(n)],
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _wait(proc: subprocess.Popen[bytes]) -> tuple[float, float]:
    """Reap ``proc``: (its own peak RSS in MiB, CPU seconds user + system). The peak is its
    ``VmHWM``, sampled (:mod:`bench.rss`): ``wait4``'s ``ru_maxrss`` counts the forked copy of
    this benchmark process too."""
    return reap([proc])[0]


class ThreadCpu:
    """Samples the CPU time of each thread of some processes until stopped (``/proc``).

    A thread's counters vanish with it, so the last sample counts: one every 20 ms misses at
    most the last 20 ms of each thread (the worker's exit), the same on both sides of an A/B.
    """

    def __init__(self, pids: list[int]) -> None:
        self._pids = pids
        self._last: dict[tuple[int, int], float] = {}  # (pid, tid) -> CPU seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        while not self._stop.is_set():
            for pid in self._pids:
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    try:
                        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                    except OSError:
                        continue
                    fields = stat.rsplit(")", 1)[1].split()
                    self._last[(pid, int(tid))] = (int(fields[11]) + int(fields[12])) / ticks
            self._stop.wait(0.02)

    def stop(self) -> tuple[float, float]:
        """Stop sampling: (CPU seconds of the processes' main threads, of their other threads)."""
        self._stop.set()
        self._thread.join()
        main = sum(cpu for (pid, tid), cpu in self._last.items() if pid == tid)
        return main, sum(self._last.values()) - main


def _drain(
    n: int, procs: int, concurrency: int, root: Path | None = None, log_level: str = "WARNING"
) -> dict[str, Any]:
    """``procs`` workers (of this tree, or of ``root``) drain ``n`` no-op tasks, logging at
    ``log_level`` (their lines go nowhere: the cost measured is making them)."""
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "rail.db"
        if root is None:
            anyio.run(_seed, db, n)
        else:
            _seed_with(root, db, n)
        config = _config(tmp, db, concurrency, drain=True, log_level=log_level)
        wall = time.perf_counter()
        workers = [_spawn(config, root) for _ in range(procs)]
        threads = ThreadCpu([w.pid for w in workers])
        reaped = reap(workers)
        loop_cpu, other_cpu = threads.stop()
        wall = time.perf_counter() - wall
        import sqlite3  # here: a measured worker imports this module for its no-op (noop)

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
            "loop_us_per_task": loop_cpu / done * 1e6 if done else 0.0,
            "threads_us_per_task": other_cpu / done * 1e6 if done else 0.0,
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
    import statistics

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
    parser.add_argument(
        "--ab",
        type=Path,
        default=None,
        metavar="ROOT",
        help="before/after in one run: drains of the source tree ROOT (A, e.g. a worktree of an"
        " older commit) and of this tree (B) in turn",
    )
    parser.add_argument("--rounds", type=int, default=1, help="drains per side with --ab")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING"),
        help="the drain workers' log_level (default WARNING, as every bench runs; INFO is the "
        "worker's own default: two lines per run)",
    )
    args = parser.parse_args()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        parser.error(f"unknown phase {unknown[0]!r} (phases: {', '.join(PHASES)})")
    if args.ab is not None:
        if not (args.ab / "worker" / "__main__.py").is_file():
            parser.error(f"--ab {args.ab}: not a source tree of this project (no worker/)")
        _ab(args.ab, [p for p in (1, 2) if f"drain{p}" in phases], args)
        return
    for procs in (1, 2):
        if f"drain{procs}" not in phases:
            continue
        r = _drain(args.tasks, procs, args.concurrency, log_level=args.log_level)
        print(
            f"drain {r['done']} no-op tasks, {procs} worker process(es) x concurrency "
            f"{args.concurrency}: {r['tasks_per_s']:.0f} tasks/s (span {r['span_s']:.2f}s, "
            f"wall incl. start-up {r['wall_s']:.2f}s), peak RSS {r['peak_rss_mib']:.1f} MiB, "
            f"worker CPU incl. start-up {r['cpu_us_per_task']:.0f} us/task (event loop "
            f"{r['loop_us_per_task']:.0f}, other threads {r['threads_us_per_task']:.0f}), "
            f"exit codes {r['exit_codes']}"
        )
    if "idle" not in phases:
        return
    idle = _idle(args.pickup_samples)
    print(
        f"idle worker: CPU {idle['idle_cpu_pct']:.2f}% of a core; pickup latency "
        f"p50 {idle['pickup_p50_ms']:.1f} ms, p95 {idle['pickup_p95_ms']:.1f} ms"
    )


def _ab(old: Path, procs_list: list[int], args: argparse.Namespace) -> None:
    """Each drain phase with the worker of ``old`` (A) and of this tree (B), alternating."""
    import statistics

    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rnd in range(args.rounds):
        for procs in procs_list:
            for side in ("A", "B") if rnd % 2 == 0 else ("B", "A"):
                root = old if side == "A" else None
                r = _drain(args.tasks, procs, args.concurrency, root, args.log_level)
                runs.setdefault((side, procs), []).append(r)
                print(
                    f"round {rnd + 1} {side} {procs} process(es): {r['tasks_per_s']:.0f} tasks/s, "
                    f"{r['cpu_us_per_task']:.0f} us/task (loop {r['loop_us_per_task']:.0f}, "
                    f"threads {r['threads_us_per_task']:.0f}), exit codes {r['exit_codes']}",
                    flush=True,
                )
    print(f"A: {old}\nB: {ROOT}\nmedians of {args.rounds} round(s), {args.tasks} tasks each")
    print(f"{'procs':<6}{'tasks/s A':>10}{'B':>8}{'B/A':>7}{'CPU us/task A':>15}{'B':>6}{'A/B':>7}")
    for procs in procs_list:
        a, b = runs[("A", procs)], runs[("B", procs)]
        ta, tb = (statistics.median(r["tasks_per_s"] for r in x) for x in (a, b))
        ca, cb = (statistics.median(r["cpu_us_per_task"] for r in x) for x in (a, b))
        print(f"{procs:<6}{ta:>10.0f}{tb:>8.0f}{tb / ta:>7.2f}{ca:>15.0f}{cb:>6.0f}{ca / cb:>7.2f}")
    print("B/A: tasks/s of B over A; A/B: how many times less worker CPU per task B uses")
    print(f"{'procs':<6}{'loop us/task A':>15}{'B':>6}{'threads us/task A':>19}{'B':>6}")
    for procs in procs_list:
        a, b = runs[("A", procs)], runs[("B", procs)]
        la, lb, oa, ob = (
            statistics.median(r[key] for r in x)
            for key in ("loop_us_per_task", "threads_us_per_task")
            for x in (a, b)
        )
        print(f"{procs:<6}{la:>15.0f}{lb:>6.0f}{oa:>19.0f}{ob:>6.0f}")
    print("loop: the workers' main threads (event loop); threads: the others (database thread)")


if __name__ == "__main__":
    main()
